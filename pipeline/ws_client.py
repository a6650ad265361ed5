"""One WebSocket client of `voxrelay serve`: the Sink of its session and its messages.

The supervisor's record callback calls the Sink methods synchronously, so they never
await: they convert reply audio, serialise events and append to the client's bounded
outgoing queue (pipeline/ws_outbox.py), which its own writer task drains. A client that
reads too slowly loses reply audio (counted), never anyone else's time; one that stays
that slow is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection

from voxrelay.pipeline.audio_io import OutputResampler
from voxrelay.pipeline.config import check_instructions
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.trace import TurnTrace
from voxrelay.pipeline.ws_outbox import CLOSE_POLICY, Outbox

if TYPE_CHECKING:
    from voxrelay.pipeline.ws import ServerConfig

VOICE_SPEEDS = (0.5, 2.0)  # Piper stays intelligible in this range (length_scale 2..0.5)
CLOSE_NORMAL = 1000
CLOSE_TRY_AGAIN = 1013
# Kernel send buffer per client: ServerConfig.send_buffer_bytes. Autotuned, it could grow
# to megabytes (a minute of audio) for a client that stopped reading; bounded, the
# outgoing queue sees the backlog, and audio counted as sent is close to audio the client
# received. 64 KiB (the kernel doubles it) covers ~1 s of 48 kHz audio on a long path.

# Sink.on_text kinds -> (event type, field that carries the text)
_TEXT_EVENTS: dict[str, tuple[str, str | None]] = {
    "speech.started": ("speech.started", None),
    "speech.held": ("speech.held", None),
    "transcript.partial": ("transcript.partial", "text"),
    "transcript.final": ("transcript.final", "text"),
    "transcript.backchannel": ("transcript.backchannel", "text"),
    "response.audio.pause": ("response.audio.pause", None),
    "response.audio.resume": ("response.audio.resume", None),
    "response.text.delta": ("response.text.delta", "delta"),
    "response.text": ("response.text.done", "text"),
}


class ClientSession:
    """One connection: its pipeline session, outgoing queue and control messages."""

    def __init__(
        self,
        connection: ServerConnection,
        pipeline: Pipeline,
        config: ServerConfig,
        input_rate: int,
        output_rate: int,
    ) -> None:
        self.connection = connection
        sock = connection.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, config.send_buffer_bytes)
        self.pipeline = pipeline
        self.config = config
        self.input_rate = input_rate
        self.output_rate = output_rate
        self._resamplers: dict[int, OutputResampler] = {}  # per turn: a turn ends its stream
        self._audio_done: set[int] = set()  # turns whose response.done went out, row to come
        self._voice_rate = 0  # the rate reply audio reaches this sink at
        self.voice_speed = 1.0
        # The session's end of turn (asr/turn_end.py); None: the ASR stage's setting.
        self.turn_eagerness: str | None = None
        self.barge_in_min_words: int | None = None  # the session's own; None: the server's
        self.turn_fallback_ms: int | None = None
        self.dropped_input_bytes = 0
        self.last_final_turn = -1
        self.speech_bytes: int | None = None  # input since speech.started; None: no speech
        self.session = pipeline.open_session(self, "websocket")
        self.session_id = self.session.session_id
        self.outbox = Outbox(connection, config, output_rate, f"session {self.session_id}")
        self.session.playbacks.sent_samples = self._sent_samples
        self._controls: dict[str, Callable[[dict[str, Any]], None]] = {
            "input.end": self._on_input_end,
            "input.text": self._on_input_text,
            "interrupt": self._on_interrupt,
            "session.update": self._on_session_update,
        }

    # Sink: called from the supervisor's record callback; never awaits.

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        self._voice_rate = sample_rate
        resampler = self._resamplers.get(turn_id)
        if resampler is None:
            resampler = self._resamplers[turn_id] = OutputResampler(sample_rate, self.output_rate)
            self.send_event("response.audio.start", turn=turn_id, sample_rate=self.output_rate)
        self._send_audio(turn_id, resampler.convert(pcm16))

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        if kind == "response.audio.clear":  # barge-in detected by the pipeline
            self._clear_audio(turn_id)
            return
        event_type, text_field = _TEXT_EVENTS.get(kind, (kind, "text"))
        if kind == "speech.started":
            self.speech_bytes = 0
        elif kind in ("transcript.final", "transcript.backchannel"):
            self.speech_bytes = None
            self.last_final_turn = max(self.last_final_turn, turn_id)
        fields: dict[str, Any] = {"turn": turn_id}
        if text_field is not None:
            fields[text_field] = text
        self.send_event(event_type, **fields)

    def on_error(self, turn_id: int, message: str) -> None:
        self.send_event("error", code="stage_failed", message=message, turn=turn_id)

    def on_audio_end(self, turn_id: int) -> None:
        self._end_audio(turn_id, "completed")

    def on_turn_done(self, trace: TurnTrace) -> None:
        # The row comes once the reply has played; `response.done` went with its audio,
        # unless the turn failed or was cut before its audio was complete.
        # A backchannel's turn got no response (pipeline/barge_in.py): its row says so.
        if trace.turn_id not in self._audio_done and not trace.backchannel:
            self._end_audio(trace.turn_id, "failed" if trace.error else "completed")
        self._audio_done.discard(trace.turn_id)
        self.send_event("trace", **trace.to_dict())

    def on_input_end(self, lost: bool) -> None:
        pass  # `input.end` gets no answer of its own: each turn's `trace` event tells the client

    def _end_audio(self, turn_id: int, status: str) -> None:
        """The resampler's tail, then `response.done`: the turn's audio is complete."""
        resampler = self._resamplers.pop(turn_id, None)
        if resampler is not None:
            self._send_audio(turn_id, resampler.convert(b"", last=True))
        self.send_event("response.done", turn=turn_id, status=status)
        self._audio_done.add(turn_id)

    def announce(self) -> None:
        """The first message: what this session is."""
        self.send_event(
            "session.created",
            session_id=self.session_id,
            sample_rate=self.input_rate,
            output_sample_rate=self.output_rate,
            max_message_bytes=self.config.max_message_bytes,
            # > 0: speech over a reply cuts it only once it holds that many words besides
            # a backchannel's, and a backchannel is dismissed (pipeline/barge_in.py)
            barge_in_min_words=self.pipeline.supervisor.config.barge_in_min_words,
        )

    # Outgoing queue.

    def send_event(self, event_type: str, turn: int = -1, **fields: Any) -> None:
        if turn >= 0:
            fields = {"turn": turn, **fields}
        self.push_message(turn, json.dumps({"type": event_type, **fields}))

    def send_error(self, code: str, message: str) -> None:
        self.send_event("error", code=code, message=message)

    def push_message(self, turn: int, text: str) -> None:
        """A text message (not reply audio) to the outgoing queue."""
        self.outbox.push_text(turn, text)

    def encode_audio(self, turn_id: int, pcm16: bytes) -> str | bytes:
        """Reply audio (PCM16 at `output_rate`) as the message that carries it."""
        return pcm16

    def _send_audio(self, turn_id: int, pcm16: bytes) -> None:
        if pcm16:
            self.outbox.push_audio(turn_id, pcm16, self.encode_audio)

    def _sent_samples(self, turn_id: int) -> int:
        """Reply audio of `turn_id` that left for the client, at the rate the sink got it:
        an upper bound of what the user heard (the client may still buffer it)."""
        sent = self.outbox.sent_audio_bytes(turn_id) // 2
        return sent * self._voice_rate // self.output_rate

    async def close_with_error(self, close_code: int, error_code: str, message: str) -> None:
        """An `error` event, then the close: the client learns why before the socket goes."""
        self.outbox.close_reason = message
        self.send_error(error_code, message)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.outbox.drained.wait(), 1.0)
        self.outbox.cut_after_grace()
        await self.connection.close(close_code, message[:120])

    # Incoming messages.

    async def on_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            await self.on_binary(message)
        else:
            self.on_json(message)

    async def on_binary(self, data: bytes) -> None:
        if len(data) % 2:
            self.send_event(
                "error",
                code="invalid_audio",
                message=f"binary frames carry PCM16 samples: got an odd length of {len(data)} "
                "bytes; this frame was dropped",
            )
            return
        await self.feed_audio(data, self.input_rate)

    async def feed_audio(self, pcm16: bytes, rate: int) -> None:
        """Client audio to the ASR, within the per-turn speech limit."""
        if self.speech_bytes is not None:
            self.speech_bytes += len(pcm16)
            limit = self.config.max_turn_audio_s * rate * 2
            if self.speech_bytes > limit:
                await self.close_with_error(
                    CLOSE_POLICY,
                    "turn_too_long",
                    f"one turn may carry at most {self.config.max_turn_audio_s:.0f} s of speech",
                )
                return
        self.dropped_input_bytes += self.pipeline.send_audio(self.session_id, pcm16, rate)

    def on_json(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError as exc:
            self.send_event("error", code="invalid_json", message=f"not JSON: {exc}")
            return
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            self.send_event(
                "error", code="invalid_message", message='expected an object with a "type" string'
            )
            return
        handler = self._controls.get(message["type"])
        if handler is None:
            known = ", ".join(sorted(self._controls))
            self.send_event(
                "error",
                code="unknown_type",
                message=f"unknown message type {message['type']!r}; known: {known}",
            )
            return
        handler(message)

    def _on_input_end(self, message: dict[str, Any]) -> None:
        self.speech_bytes = None
        self.pipeline.end_input(self.session_id)

    def _on_input_text(self, message: dict[str, Any]) -> None:
        text = message.get("text")
        try:
            if not isinstance(text, str):
                raise ValueError("input.text needs a text string")
            self.pipeline.send_text(self.session_id, text)
        except ValueError as exc:
            self.send_event("error", code="invalid_message", message=str(exc))

    def _on_interrupt(self, message: dict[str, Any]) -> None:
        # Replies exist only for finalized turns: a floor just above the last one stops
        # its reply but spares the utterance the user may be speaking right now.
        floor = self.last_final_turn + 1
        self.pipeline.new_turn(self.session_id, floor)
        self._clear_audio(floor)

    def _clear_audio(self, floor: int) -> None:
        """Drop queued reply audio of turns before `floor` and tell the client to stop."""
        self.drop_audio_before(floor)
        self.send_event("response.audio.clear", turn=floor)

    def drop_audio_before(self, floor: int) -> None:
        """Forget reply audio of turns before `floor`: queued, being resampled, sent."""
        self.outbox.drop_audio_before(floor)
        for turn in [t for t in self._resamplers if t < floor]:
            del self._resamplers[turn]

    def _on_session_update(self, message: dict[str, Any]) -> None:
        instructions = message.get("instructions")
        speed = message.get("voice_speed")
        try:
            if instructions is not None:
                check_instructions(instructions)
        except (TypeError, ValueError) as exc:
            self.send_event("error", code="invalid_message", message=str(exc))
            return
        low, high = VOICE_SPEEDS
        number = isinstance(speed, int | float) and not isinstance(speed, bool)
        if speed is not None and not (number and low <= speed <= high):
            self.send_event(
                "error",
                code="invalid_message",
                message=f"voice_speed must be a number from {low} to {high} (1.0 = normal "
                f"tempo), got {speed!r}; nothing was changed",
            )
            return
        words = message.get("barge_in_min_words", self.barge_in_min_words)
        if words != self.barge_in_min_words:
            try:  # checked here, set with the rest: nothing of a refused update applies
                self.pipeline.check_barge_in_min_words(words)
            except ValueError as exc:
                self.send_event(
                    "error", code="invalid_message", message=f"{exc}; nothing was changed"
                )
                return
        eagerness = message.get("turn_eagerness", self.turn_eagerness)
        fallback = message.get("turn_fallback_ms", self.turn_fallback_ms)
        taking = (eagerness, fallback) != (self.turn_eagerness, self.turn_fallback_ms)
        if taking:
            try:  # validated before anything of this update is applied
                if fallback is not None and (
                    not isinstance(fallback, int) or isinstance(fallback, bool)
                ):
                    raise ValueError(f"turn_fallback_ms must be an integer, got {fallback!r}")
                if eagerness is not None and not isinstance(eagerness, str):
                    raise ValueError(f"turn_eagerness must be a string, got {eagerness!r}")
                self.pipeline.set_turn_taking(self.session_id, eagerness, fallback)
            except ValueError as exc:
                self.send_event(
                    "error", code="invalid_message", message=f"{exc}; nothing was changed"
                )
                return
            self.turn_eagerness, self.turn_fallback_ms = eagerness, fallback
        if words != self.barge_in_min_words:
            self.pipeline.set_barge_in_min_words(self.session_id, words)
            self.barge_in_min_words = words
        if instructions is not None:
            self.pipeline.set_system_prompt(self.session_id, instructions)
        if speed is not None:
            self.voice_speed = float(speed)
            self.pipeline.set_voice_speed(self.session_id, self.voice_speed)
        self.send_event(
            "session.updated",
            instructions=instructions is not None,
            voice_speed=self.voice_speed,
            turn_eagerness=self.turn_eagerness,
            turn_fallback_ms=self.turn_fallback_ms,
            barge_in_min_words=self.pipeline.supervisor.config.barge_in_min_words
            if self.barge_in_min_words is None
            else self.barge_in_min_words,
        )

    def close(self) -> None:
        """The connection is gone: free the session here and in every stage."""
        self.pipeline.close_session(self.session_id)
        self.outbox.close()
        self._resamplers.clear()
