"""The server side of `/v1/realtime`: pipeline output as OpenAI Realtime events.

`RealtimeOutput` is the Sink of one Realtime session (`ClientSession`'s outgoing queue,
pacing, stall and barge-in handling underneath): the ASR's speech start, partials and
final become `input_audio_buffer.*` and `conversation.item.*` events; each committed
turn's reply becomes one response, `response.created` to `response.done`, with its audio
as base64 `response.output_audio.delta` in the session's output format.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection

from voxrelay.asr.events import TYPED
from voxrelay.pipeline.audio_io import OutputResampler
from voxrelay.pipeline.heard import Playback
from voxrelay.pipeline.realtime_config import RealtimeConfig, RealtimeError
from voxrelay.pipeline.realtime_events import (
    BETA_NAMES,
    encode_base64,
    error_object,
    message_item,
    new_id,
    response_object,
    session_object,
    usage_of,
)
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.trace import TurnTrace
from voxrelay.pipeline.ws_client import ClientSession

if TYPE_CHECKING:
    from voxrelay.pipeline.ws import ServerConfig

ANSWERED_ITEMS = 8  # assistant items a `conversation.item.truncate` may still name


@dataclass(slots=True)
class Reply:
    """One response: a turn's reply, from response.created to response.done."""

    turn: int
    response_id: str
    item_id: str
    trace: TurnTrace | None  # the turn's row as it fills in (tokens for `usage`)
    deltas: list[str] = field(default_factory=list)
    text: str | None = None  # the LLM's whole reply (REPLY_TEXT), once known
    playback: Playback | None = None  # the session's record of its audio (for truncate)
    audio_done: bool = False  # response.output_audio.done went out

    def ids(self) -> dict[str, Any]:
        return {
            "response_id": self.response_id,
            "item_id": self.item_id,
            "output_index": 0,
            "content_index": 0,
        }


class RealtimeOutput(ClientSession):
    """One `/v1/realtime` session's output: its Sink and the events it sends."""

    def __init__(
        self,
        connection: ServerConnection,
        pipeline: Pipeline,
        config: ServerConfig,
        model: str,
        beta: bool,
    ) -> None:
        self.settings = RealtimeConfig()
        super().__init__(
            connection,
            pipeline,
            config,
            self.settings.input_format.rate,
            self.settings.output_format.rate,
        )
        self.model = model
        self.beta = beta  # `OpenAI-Beta: realtime=v1`: server events under the beta's names
        self.realtime_id = new_id("sess")
        self._replies: dict[int, Reply] = {}  # by turn: created, not done yet
        self._done_turn = -1  # the latest turn whose response is done
        self._cutting: str | None = None  # the reason of a cut the client asked for
        self._answered: OrderedDict[str, Reply] = OrderedDict()  # by item id, for truncate
        self._user_items: dict[int, str] = {}  # turn -> its user item (VAD: from speech start)
        self._commit_item: str | None = None  # manual: the item a commit announced
        self._last_item: str | None = None  # previous_item_id of the next item
        self._held_input = bytearray()  # manual: appended, not committed (PCM16, input rate)
        self._input_ms = 0.0  # client audio received so far: the API's audio_*_ms clock
        self._open_turn: int | None = None  # speech started, no final yet
        self._partials: dict[int, str] = {}  # transcript sent as deltas, by turn
        # Typed items sent to the pipeline, in order, until the ASR numbers their turns.
        self._typed_items: deque[str] = deque()
        self._typed_turns: set[int] = set()  # numbered, not final yet
        self._barge_in = (self.session.on_speech_start, self.session.on_transcript)
        # The Realtime protocol has no pause: a client stops its playback itself at
        # `input_audio_buffer.speech_started`, and the words' rule cuts or not.
        self.session.pauses_replies = False
        self._pipeline_events: dict[str, Callable[[int, str], None]] = {
            "speech.started": self._speech_started,
            "transcript.partial": self._partial,
            "transcript.final": self._final,
            "transcript.backchannel": self._backchannel,
            "response.text.delta": self._reply_delta,
            "response.text": self._reply_text,
            "response.audio.clear": self._barged_in,
        }

    # Outgoing events.

    def emit(self, event_type: str, turn: int = -1, **fields: Any) -> None:
        self.push_message(turn, self._event(event_type, fields))

    def _event(self, event_type: str, fields: dict[str, Any]) -> str:
        name = BETA_NAMES.get(event_type, event_type) if self.beta else event_type
        return json.dumps({"type": name, "event_id": new_id("event"), **fields})

    def send_error(self, code: str, message: str) -> None:
        self.emit("error", error=error_object(RealtimeError(code, message), None, "server_error"))

    def announce(self) -> None:
        self.emit("session.created", session=self._session())

    def _session(self) -> dict[str, Any]:
        return session_object(self.settings, self.realtime_id, self.model)

    def encode_audio(self, turn_id: int, pcm16: bytes) -> str | bytes:
        reply = self._replies[turn_id]
        audio = encode_base64(self.settings.output_format.encode(pcm16))
        return self._event("response.output_audio.delta", {**reply.ids(), "delta": audio})

    # Sink: called from the supervisor's record callback; never awaits.

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        handler = self._pipeline_events.get(kind)  # "speech.held" has no Realtime event
        if handler is not None:
            handler(turn_id, text)

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        self._voice_rate = sample_rate
        reply = self._reply(turn_id)
        if reply is None:
            return
        if reply.playback is None:
            reply.playback = self.session.playbacks.get(turn_id)
        resampler = self._resamplers.get(turn_id)
        if resampler is None:
            resampler = self._resamplers[turn_id] = OutputResampler(sample_rate, self.output_rate)
        self._send_audio(turn_id, resampler.convert(pcm16))

    def on_audio_end(self, turn_id: int) -> None:
        # All the audio is made and sent; the response lasts until it has played out (by
        # real time from its first sample: the row), so a reply being heard can be cut.
        reply = self._replies.get(turn_id)
        resampler = self._resamplers.pop(turn_id, None)
        if reply is None or reply.audio_done:
            return
        if resampler is not None:
            self._send_audio(turn_id, resampler.convert(b"", last=True))
        reply.audio_done = True
        self.emit("response.output_audio.done", **reply.ids())

    def on_error(self, turn_id: int, message: str) -> None:
        self.send_error("stage_failed", message)

    def on_turn_done(self, trace: TurnTrace) -> None:
        self._user_items.pop(trace.turn_id, None)
        self._partials.pop(trace.turn_id, None)
        if trace.error:
            self._finish(trace.turn_id, "failed")
        elif trace.barge_in_ns:  # cut: by the client (response.cancel) or by its speech
            self._finish(trace.turn_id, "cancelled", self._cutting or "turn_detected")
        else:
            self._finish(trace.turn_id, "completed")

    def _speech_started(self, turn_id: int, text: str) -> None:
        if text == TYPED:  # a text item the client created: it was announced then
            if self._typed_items:
                self._user_items[turn_id] = self._typed_items.popleft()
                self._typed_turns.add(turn_id)
            return
        self.speech_bytes = 0
        self._open_turn = turn_id
        if self.settings.turn_detection is None:
            return  # manual: the commit announced the item; no VAD events
        item = self._user_items[turn_id] = new_id("item")
        self.emit(
            "input_audio_buffer.speech_started", audio_start_ms=int(self._input_ms), item_id=item
        )

    def _partial(self, turn_id: int, text: str) -> None:
        # Realtime deltas append; the ASR's partials are whole hypotheses whose last word
        # may still change. Send the words that extend what was sent, but the last.
        item = self._user_items.get(turn_id, self._commit_item)
        sent = self._partials.get(turn_id, "")
        settled = " ".join(text.split()[:-1])
        if item is None or not settled.startswith(sent) or len(settled) <= len(sent):
            return
        self._partials[turn_id] = settled
        self.emit(
            "conversation.item.input_audio_transcription.delta",
            item_id=item,
            content_index=0,
            delta=settled[len(sent) :],
        )

    def _backchannel(self, turn_id: int, text: str) -> None:
        # "Mm-hmm" over a reply (pipeline/barge_in.py): the user's item, and no response.
        self._final(turn_id, text, respond=False)

    def _final(self, turn_id: int, text: str, respond: bool = True) -> None:
        self.last_final_turn = max(self.last_final_turn, turn_id)
        if turn_id in self._typed_turns:  # no audio, no transcription: just the answer
            self._typed_turns.discard(turn_id)
            self._reply(turn_id)
            return
        self.speech_bytes = None
        self._open_turn = None
        item = self._commit_item
        self._commit_item = None
        if item is None:  # server VAD committed it (or a second turn of one commit)
            item = self._user_items.get(turn_id) or new_id("item")
            if self.settings.turn_detection is not None:
                self.emit(
                    "input_audio_buffer.speech_stopped",
                    audio_end_ms=int(self._input_ms),
                    item_id=item,
                )
            self._announce_user_item(item)
        self._user_items[turn_id] = item
        self.emit(
            "conversation.item.input_audio_transcription.completed",
            item_id=item,
            content_index=0,
            transcript=text,
            usage={"type": "duration", "seconds": 0},
        )
        if respond and text.strip():
            self._reply(turn_id)

    def _announce_user_item(self, item: str) -> None:
        self.emit("input_audio_buffer.committed", item_id=item, previous_item_id=self._last_item)
        self.emit(
            "conversation.item.added",
            previous_item_id=self._last_item,
            item=message_item(item, "user", None, "completed"),
        )
        self._last_item = item

    def _reply(self, turn_id: int) -> Reply | None:
        """The turn's response, created (response.created and its item) on first need;
        None once it is done (a record that came after the response ended)."""
        reply = self._replies.get(turn_id)
        if reply is not None or turn_id <= self._done_turn:
            return reply
        trace = self.session.turns.get(turn_id)
        reply = self._replies[turn_id] = Reply(turn_id, new_id("resp"), new_id("item"), trace)
        fmt = self.settings.output_format
        self.emit(
            "response.created", response=response_object(reply.response_id, "in_progress", [], fmt)
        )
        item = message_item(reply.item_id, "assistant", None, "in_progress")
        self.emit(
            "response.output_item.added", response_id=reply.response_id, output_index=0, item=item
        )
        self.emit("conversation.item.added", previous_item_id=self._last_item, item=item)
        self._last_item = reply.item_id
        self.emit(
            "response.content_part.added", **reply.ids(), part={"type": "audio", "transcript": ""}
        )
        return reply

    def _reply_delta(self, turn_id: int, delta: str) -> None:
        reply = self._reply(turn_id)
        if reply is None:
            return
        reply.deltas.append(delta)
        self.emit("response.output_audio_transcript.delta", **reply.ids(), delta=delta)

    def _reply_text(self, turn_id: int, text: str) -> None:
        reply = self._reply(turn_id)
        if reply is not None:
            reply.text = text

    def _barged_in(self, floor: int, _text: str) -> None:
        self._cancel_before(floor, "turn_detected")

    def _cancel_before(self, floor: int, reason: str) -> None:
        self.drop_audio_before(floor)
        for turn in sorted(t for t in self._replies if t < floor):
            self._finish(turn, "cancelled", reason)

    def _finish(self, turn_id: int, status: str, reason: str | None = None) -> None:
        """The response's closing events, once: transcript, item, response.done."""
        reply = self._replies.get(turn_id)
        if reply is None:
            return
        self._resamplers.pop(turn_id, None)
        del self._replies[turn_id]
        self._done_turn = max(self._done_turn, turn_id)
        spoken = "".join(reply.deltas).strip()
        transcript = reply.text if status == "completed" and reply.text is not None else spoken
        if not reply.audio_done:
            self.emit("response.output_audio.done", **reply.ids())
        self.emit("response.output_audio_transcript.done", **reply.ids(), transcript=transcript)
        self.emit(
            "response.content_part.done",
            **reply.ids(),
            part={"type": "audio", "transcript": transcript},
        )
        item_status = "completed" if status == "completed" else "incomplete"
        item = message_item(reply.item_id, "assistant", transcript, item_status)
        self.emit(
            "response.output_item.done", response_id=reply.response_id, output_index=0, item=item
        )
        self.emit("conversation.item.done", item=item)
        trace = reply.trace
        usage = None
        if trace is not None and trace.prefill_tokens:
            usage = usage_of(trace.prefill_tokens, trace.prefill_early_tokens, len(reply.deltas))
        fmt = self.settings.output_format
        response = response_object(reply.response_id, status, [item], fmt, reason, usage)
        self.emit("response.done", response=response)
        self._answered[reply.item_id] = reply
        while len(self._answered) > ANSWERED_ITEMS:
            self._answered.popitem(last=False)
