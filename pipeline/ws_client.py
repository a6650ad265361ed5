"""One WebSocket client of `voxrelay serve`: the Sink of its session and its messages.

The supervisor's record callback calls the Sink methods synchronously, so they never
await: they convert reply audio, serialise events and append to a bounded outgoing
queue that this client's own writer task drains. A client that reads too slowly loses
reply audio (counted), never anyone else's time; one that stays that slow is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection

from voxrelay.pipeline.audio_io import OutputResampler
from voxrelay.pipeline.config import check_instructions
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.trace import TurnTrace

if TYPE_CHECKING:
    from voxrelay.pipeline.ws import ServerConfig

log = logging.getLogger("voxrelay.ws")

VOICE_SPEEDS = (0.5, 2.0)  # Piper stays intelligible in this range (length_scale 2..0.5)
MAX_QUEUED_EVENTS = 4096  # JSON events waiting for one client before it counts as stalled
CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_TRY_AGAIN = 1013
# A client that does not take our close frame (it stopped reading) is cut after this.
CLOSE_GRACE_S = 2.0
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
        self._loop = asyncio.get_running_loop()
        # (turn, message, reply audio bytes it carries at output_rate: 0 for an event)
        self._queue: deque[tuple[int, str | bytes, int]] = deque()
        self._queued_audio_bytes = 0
        self._queue_max_audio_bytes = int(config.send_queue_audio_s * output_rate) * 2
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._resamplers: dict[int, OutputResampler] = {}  # per turn: a turn ends its stream
        self._audio_done: set[int] = set()  # turns whose response.done went out, row to come
        self._overflowed = False  # reply audio was dropped since the writer was last idle
        self._last_sent = self._loop.time()  # the writer's last completed send, or the
        # last time the transport's buffer was seen to shrink (the kernel took bytes)
        self._buffered_at_check = 0
        self._stall_check: asyncio.TimerHandle | None = None
        self._voice_rate = 0  # the rate reply audio reaches this sink at
        self._sent_bytes: dict[int, int] = {}  # by turn: reply audio that left for the client
        self.voice_speed = 1.0
        # The session's end of turn (asr/turn_end.py); None: the ASR stage's setting.
        self.turn_eagerness: str | None = None
        self.turn_fallback_ms: int | None = None
        self._closing: asyncio.Task[None] | None = None
        self.dropped_audio_bytes = 0
        self.close_reason: str | None = None  # set once the server decided to close
        self.dropped_input_bytes = 0
        self.last_final_turn = -1
        self.speech_bytes: int | None = None  # input since speech.started; None: no speech
        self.last_activity = self._loop.time()
        self.session = pipeline.open_session(self, "websocket")
        self.session_id = self.session.session_id
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
        elif kind == "transcript.final":
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
        if trace.turn_id not in self._audio_done:
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
        self._push(turn, text)
        if len(self._queue) > MAX_QUEUED_EVENTS:
            self.abort(CLOSE_POLICY, "client does not read its messages")

    def encode_audio(self, turn_id: int, pcm16: bytes) -> str | bytes:
        """Reply audio (PCM16 at `output_rate`) as the message that carries it."""
        return pcm16

    def _send_audio(self, turn_id: int, pcm16: bytes) -> None:
        if not pcm16:
            return
        if self._queued_audio_bytes + len(pcm16) > self._queue_max_audio_bytes:
            # Never wait for a slow client here: drop, count, and close it if it stays slow
            # (a timer: the reply may end, and nothing else arrive, while it stays stuck).
            self.dropped_audio_bytes += len(pcm16)
            self._overflowed = True
            if self._stall_check is None:
                self._stall_check = self._loop.call_later(
                    self.config.stalled_client_s, self._check_stalled
                )
            return
        self._queued_audio_bytes += len(pcm16)
        self._push(turn_id, self.encode_audio(turn_id, pcm16), len(pcm16))

    def _check_stalled(self) -> None:
        """Stalled: the queue overflowed, and the client has taken nothing for
        `stalled_client_s` while reply audio waits for it. One that still reads, however
        slowly, only loses audio."""
        self._stall_check = None
        # The writer may be idle with its last messages still in the transport's buffer:
        # what the kernel takes from there is progress too; what it never takes is not.
        buffered = self._transport_buffered()
        if buffered < self._buffered_at_check:
            self._last_sent = self._loop.time()
        self._buffered_at_check = buffered
        if not self._queue and not buffered:
            self._overflowed = False
        if not self._overflowed:
            return  # the client has caught up since
        waited = self._loop.time() - self._last_sent
        if waited >= self.config.stalled_client_s:
            self.abort(CLOSE_POLICY, "client reads reply audio too slowly")
        else:
            self._stall_check = self._loop.call_later(
                self.config.stalled_client_s - waited, self._check_stalled
            )

    def _transport_buffered(self) -> int:
        transport = self.connection.transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def _sent_samples(self, turn_id: int) -> int:
        """Reply audio of `turn_id` that left for the client, at the rate the sink got it:
        an upper bound of what the user heard (the client may still buffer it)."""
        sent = self._sent_bytes.get(turn_id, 0) // 2
        return sent * self._voice_rate // self.output_rate

    def _push(self, turn_id: int, message: str | bytes, audio_bytes: int = 0) -> None:
        self.last_activity = self._loop.time()
        self._queue.append((turn_id, message, audio_bytes))
        self._drained.clear()
        self._wake.set()

    async def write_loop(self) -> None:
        """Drains the outgoing queue into the socket; ends when the connection does."""
        while True:
            if not self._queue:
                if not self._transport_buffered():  # else: the stall timer decides
                    self._overflowed = False
                self._drained.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            turn, message, audio_bytes = self._queue.popleft()
            await self.connection.send(message)
            self._last_sent = self._loop.time()
            if audio_bytes:
                self._queued_audio_bytes -= audio_bytes
                self._sent_bytes[turn] = self._sent_bytes.get(turn, 0) + audio_bytes
                if len(self._sent_bytes) > 4:  # only recent turns can still be cut
                    del self._sent_bytes[min(self._sent_bytes)]

    def abort(self, code: int, reason: str) -> None:
        """Close this connection from a callback that must not await."""
        if self._closing is None:
            self.close_reason = reason
            log.warning("session %d: closing with %d: %s", self.session_id, code, reason)
            self._closing = self._loop.create_task(self.connection.close(code, reason[:120]))
            # close() waits until the close frame is written, which never happens for a
            # client that stopped reading: drop the TCP connection after a grace period.
            self._loop.call_later(CLOSE_GRACE_S, self.connection.transport.abort)

    async def close_with_error(self, close_code: int, error_code: str, message: str) -> None:
        """An `error` event, then the close: the client learns why before the socket goes."""
        self.close_reason = message
        self.send_error(error_code, message)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), 1.0)
        self._loop.call_later(CLOSE_GRACE_S, self.connection.transport.abort)
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
        kept: deque[tuple[int, str | bytes, int]] = deque()
        for entry in self._queue:
            turn, _message, audio_bytes = entry
            if audio_bytes and turn < floor:
                self._queued_audio_bytes -= audio_bytes
            else:
                kept.append(entry)
        self._queue = kept
        for turn in [t for t in self._resamplers if t < floor]:
            del self._resamplers[turn]
        for turn in [t for t in self._sent_bytes if t < floor]:
            del self._sent_bytes[turn]

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
        )

    def close(self) -> None:
        """The connection is gone: free the session here and in every stage."""
        self.pipeline.close_session(self.session_id)
        if self._stall_check is not None:
            self._stall_check.cancel()
        self._queue.clear()
        self._resamplers.clear()
