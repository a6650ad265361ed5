"""`/v1/realtime`: one OpenAI-Realtime-compatible client of `voxrelay serve`.

The same kind of session over the same stage processes as `/v1/voice`, speaking the
Realtime API's JSON events: base64 audio in `input_audio_buffer.append`, replies out as
`pipeline/realtime_responses.py` sends them. The ASR detects turns (server_vad /
semantic_vad); with `turn_detection: null` appended audio is held until
`input_audio_buffer.commit`, then goes to the ASR at once with END_OF_INPUT behind it,
as `/v1/voice`'s `input.end` does. `docs/protocol.md`, "OpenAI Realtime endpoint", maps
each event.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from voxrelay.pipeline.heard import heard_text
from voxrelay.pipeline.realtime_config import (
    RealtimeError,
    apply_update,
    decode_base64,
    turn_taking,
)
from voxrelay.pipeline.realtime_events import error_object, new_id
from voxrelay.pipeline.realtime_items import text_item, typed_item
from voxrelay.pipeline.realtime_responses import RealtimeOutput

MIN_COMMIT_MS = 100  # what the API asks of a manual commit


class RealtimeSession(RealtimeOutput):
    """One `/v1/realtime` connection: the client events it accepts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client_events: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
            "conversation.item.create": self._item_create,
            "conversation.item.truncate": self._truncate,
        }

    async def on_message(self, message: str | bytes) -> None:
        event: Any = None
        try:
            if isinstance(message, bytes):
                raise RealtimeError(
                    "invalid_value",
                    "binary frames are not Realtime events: send input_audio_buffer.append",
                )
            try:
                event = json.loads(message)
            except ValueError as exc:
                raise RealtimeError("invalid_json", f"the message is not JSON: {exc}") from None
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise RealtimeError(
                    "invalid_value", 'expected an object with a "type" string', "type"
                )
            if len(message) > self.config.max_message_bytes:  # read to name it, not applied
                raise RealtimeError(
                    "message_too_large",
                    f"this event is {len(message)} bytes; the limit is "
                    f"{self.config.max_message_bytes}: it was dropped",
                )
            handler = self._client_events.get(event["type"])
            if handler is None:
                known = ", ".join(f"'{name}'" for name in self._client_events)
                raise RealtimeError(
                    "invalid_value",
                    f"Invalid value: '{event['type']}'. Supported values are: {known}.",
                    "type",
                )
            await handler(event)
        except RealtimeError as error:
            client_event_id = event.get("event_id") if isinstance(event, dict) else None
            if not isinstance(client_event_id, str):
                client_event_id = None
            self.emit("error", error=error_object(error, client_event_id))

    async def _session_update(self, event: dict[str, Any]) -> None:
        old, new = self.settings, apply_update(self.settings, event.get("session"))
        if new.output_format != old.output_format and self._replies:
            raise RealtimeError(
                "invalid_value",
                "the output format can change only between responses",
                "session.audio.output.format",
            )
        if new.input_format != old.input_format and self._held_input:
            raise RealtimeError(
                "invalid_value",
                "commit or clear the input audio buffer before changing its format",
                "session.audio.input.format",
            )
        self.settings = new
        self.input_rate = new.input_format.rate
        self.output_rate = new.output_format.rate
        self._queue_max_audio_bytes = int(self.config.send_queue_audio_s * self.output_rate) * 2
        session = event["session"]
        if "instructions" in session:
            self.pipeline.set_system_prompt(self.session_id, new.instructions)
        if new.speed != old.speed:
            self.pipeline.set_voice_speed(self.session_id, new.speed)
        detection = new.turn_detection
        if detection is None and old.turn_detection is not None and self._open_turn is not None:
            self.pipeline.end_input(self.session_id)  # the utterance under way ends now
        if detection is not None and self._held_input:  # manual -> VAD: what was held goes
            held, self._held_input = bytes(self._held_input), bytearray()
            await self.feed_audio(held, self.input_rate)
        if detection is not None and detection != old.turn_detection:
            try:  # semantic_vad's eagerness, server_vad's silence: the ASR's end of turn
                self.pipeline.set_turn_taking(self.session_id, *turn_taking(detection))
            except ValueError as exc:
                raise RealtimeError("invalid_value", str(exc), "session.audio.input") from None
        interrupting = detection is None or detection.interrupt_response
        hooks = self._barge_in if interrupting else (None, None)
        self.session.on_speech_start, self.session.on_transcript = hooks
        self.emit("session.updated", session=self._session())

    async def _append(self, event: dict[str, Any]) -> None:
        fmt = self.settings.input_format
        pcm = fmt.decode(decode_base64(event.get("audio")))
        if self.settings.turn_detection is None:
            limit = int(self.config.max_turn_audio_s * fmt.rate) * 2
            if len(self._held_input) + len(pcm) > limit:
                raise RealtimeError(
                    "input_audio_buffer_too_large",
                    "the input audio buffer "
                    f"holds at most {self.config.max_turn_audio_s:.0f} s; commit"
                    " or clear it (this append was dropped)",
                    "audio",
                )
            self._held_input += pcm
        else:
            await self.feed_audio(pcm, fmt.rate)
        self._input_ms += len(pcm) / 2 / fmt.rate * 1000

    async def _commit(self, event: dict[str, Any]) -> None:
        if self.settings.turn_detection is not None:
            if self._open_turn is None:
                raise RealtimeError(
                    "input_audio_buffer_commit_empty", "no speech since the last commit to commit"
                )
            self.speech_bytes = None
            self.pipeline.end_input(self.session_id)  # the final commits the item
            return
        rate = self.settings.input_format.rate
        held_ms = len(self._held_input) / 2 / rate * 1000
        if held_ms < MIN_COMMIT_MS:
            raise RealtimeError(
                "input_audio_buffer_commit_empty",
                "buffer too small: expected "
                f"at least {MIN_COMMIT_MS}ms of audio, got {held_ms:.2f}ms",
            )
        item = self._commit_item = new_id("item")
        self._announce_user_item(item)
        held, self._held_input = bytes(self._held_input), bytearray()
        self.dropped_input_bytes += self.pipeline.send_audio(self.session_id, held, rate)
        self.pipeline.end_input(self.session_id)

    async def _clear(self, event: dict[str, Any]) -> None:
        self._held_input.clear()
        if self._open_turn is not None and self.settings.turn_detection is not None:
            # The ASR has the utterance under way: every stage drops it (and, like speech
            # over a reply would have, what is left of an older reply).
            floor = self._open_turn + 1
            self.pipeline.new_turn(self.session_id, floor)
            self._cancel_before(floor, "turn_detected")
            self._user_items.pop(self._open_turn, None)
            self._open_turn = self.speech_bytes = None
        self.emit("input_audio_buffer.cleared")

    async def _response_create(self, event: dict[str, Any]) -> None:
        # Every committed turn is answered at once; this acknowledges the client's trigger.
        if self._replies or self._commit_item or self._open_turn is not None or self._typed_items:
            return
        # Nothing new to answer: the agent speaks up (before any input, it opens the
        # conversation), in words the model writes from the conversation and the
        # session's instructions, or the response's own.
        response = event.get("response") or {}
        if not isinstance(response, dict):
            raise RealtimeError("invalid_type", "'response' must be an object", "response")
        if self.session.replying():  # a reply with no response here (a race with its end)
            raise RealtimeError(
                "conversation_already_has_active_response",
                "a reply is coming or playing: the agent speaks after it",
            )
        instructions = response.get("instructions")
        try:
            self.pipeline.say(self.session_id, instructions=instructions or None)
        except TypeError as exc:
            raise RealtimeError("invalid_type", str(exc), "response.instructions") from None
        except ValueError as exc:
            raise RealtimeError("invalid_value", str(exc), "response.instructions") from None

    async def _item_create(self, event: dict[str, Any]) -> None:
        """A user text message: a turn the user typed, answered at once (as a committed
        audio turn is); the ASR numbers it behind the audio sent before it."""
        typed = typed_item(event, self._last_item)
        try:
            self.pipeline.send_text(self.session_id, typed.text)
        except (TypeError, ValueError) as exc:
            raise RealtimeError("invalid_value", str(exc), "item.content") from None
        self._typed_items.append(typed.item_id)  # its turn's SpeechStart takes it
        item = text_item(typed.item_id, typed.text)
        self.emit("conversation.item.added", previous_item_id=self._last_item, item=item)
        self.emit("conversation.item.done", previous_item_id=self._last_item, item=item)
        self._last_item = typed.item_id

    async def _response_cancel(self, event: dict[str, Any]) -> None:
        wanted = event.get("response_id")
        active = {reply.response_id for reply in self._replies.values()}
        if not active or (wanted is not None and wanted not in active):
            raise RealtimeError(
                "response_cancel_not_active", "Cancellation failed: no active response found"
            )
        self._cancel(self.last_final_turn + 1)

    def _cancel(self, floor: int) -> None:
        # Replies exist only for finalized turns: a floor just above the last one stops
        # them but spares the utterance the user may be speaking right now.
        self._cutting = "client_cancelled"
        try:  # rows of cut turns still playing come back through on_turn_done
            self.pipeline.new_turn(self.session_id, floor)
        finally:
            self._cutting = None
        self._cancel_before(floor, "client_cancelled")

    async def _truncate(self, event: dict[str, Any]) -> None:
        item = event.get("item_id")
        reply = self._answered.get(item) if isinstance(item, str) else None
        active = next((r for r in self._replies.values() if r.item_id == item), None)
        reply = reply or active
        if reply is None:
            raise RealtimeError("invalid_value", f"no assistant audio item {item!r}", "item_id")
        if event.get("content_index", 0) != 0:
            raise RealtimeError(
                "invalid_value", "the item has one content part: 0", "content_index"
            )
        end_ms = event.get("audio_end_ms")
        if not isinstance(end_ms, int) or isinstance(end_ms, bool) or end_ms < 0:
            raise RealtimeError(
                "invalid_value", "audio_end_ms must be an integer >= 0", "audio_end_ms"
            )
        playback = reply.playback
        sent_ms = 1000 * playback.delivered_samples / playback.rate if playback else 0.0
        if end_ms > sent_ms + 1:
            raise RealtimeError(
                "invalid_value",
                f"audio_end_ms {end_ms} is past the item's audio ({sent_ms:.0f} ms)",
                "audio_end_ms",
            )
        if active is not None:
            self._cancel(reply.turn + 1)
        if playback is not None:
            heard = heard_text(playback.fragments, end_ms * playback.rate // 1000)
            self.pipeline.set_heard(self.session_id, reply.turn, heard)
        self.emit(
            "conversation.item.truncated",
            item_id=reply.item_id,
            content_index=0,
            audio_end_ms=end_ms,
        )
