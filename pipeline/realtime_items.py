"""`conversation.item.create` on `/v1/realtime`: what a client may add to the conversation.

A user message of `input_text` parts is a turn the user typed (Pipeline.send_text): it is
answered as a committed audio turn is, at once. Everything else an item can be in the API
(system and assistant messages, audio parts, function calls and their outputs) is refused
with a message that says what to do instead; the session goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voxrelay.pipeline.realtime_config import RealtimeError
from voxrelay.pipeline.realtime_events import new_id

MAX_ITEM_ID_CHARS = 32  # the API's limit on a client-chosen item id
_ITEM_FIELDS = frozenset({"id", "type", "object", "role", "status", "content"})


@dataclass(frozen=True, slots=True)
class TypedItem:
    item_id: str
    text: str  # the input_text parts, joined by a space


def typed_item(event: dict[str, Any], last_item: str | None) -> TypedItem:
    """The user text message a `conversation.item.create` event adds; RealtimeError for
    anything else. `last_item`: the conversation's last item (items are appended only)."""
    previous = event.get("previous_item_id")
    if previous is not None and previous != last_item:
        raise RealtimeError(
            "unsupported_value",
            "items are appended after the conversation's last item here; leave "
            "previous_item_id out (or give the last item's id)",
            "previous_item_id",
        )
    item = event.get("item")
    if not isinstance(item, dict):
        raise RealtimeError("invalid_type", "'item' must be an object", "item")
    unknown = sorted(set(item) - _ITEM_FIELDS)
    if unknown:
        raise RealtimeError(
            "unknown_parameter", f"Unknown parameter: 'item.{unknown[0]}'.", f"item.{unknown[0]}"
        )
    if item.get("type") != "message":
        raise RealtimeError(
            "unsupported_value",
            f"item type {item.get('type')!r} is not supported: voxrelay adds user text "
            "messages (function calling is not supported)",
            "item.type",
        )
    if item.get("role") != "user":
        raise RealtimeError(
            "unsupported_value",
            f"a {item.get('role')!r} message cannot be added: send user messages; the "
            "system prompt is session.update's instructions",
            "item.role",
        )
    return TypedItem(_item_id(item.get("id")), _text(item.get("content")))


def _item_id(value: Any) -> str:
    if value is None:
        return new_id("item")
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ITEM_ID_CHARS:
        raise RealtimeError(
            "invalid_value",
            f"item.id must be a string of 1 to {MAX_ITEM_ID_CHARS} characters",
            "item.id",
        )
    return value


def _text(content: Any) -> str:
    if not isinstance(content, list) or not content:
        raise RealtimeError(
            "invalid_value", "item.content must be a non-empty array", "item.content"
        )
    texts = []
    for index, part in enumerate(content):
        param = f"item.content[{index}]"
        if not isinstance(part, dict) or part.get("type") != "input_text":
            kind = part.get("type") if isinstance(part, dict) else part
            raise RealtimeError(
                "unsupported_value",
                f"content part {kind!r} is not supported: give the user's words as "
                "input_text (audio goes in input_audio_buffer.append)",
                f"{param}.type",
            )
        if not isinstance(part.get("text"), str):
            raise RealtimeError("invalid_type", f"'{param}.text' must be a string", f"{param}.text")
        texts.append(part["text"])
    return " ".join(texts)


def text_item(item_id: str, text: str) -> dict[str, Any]:
    """The user's text message item, as the server echoes it."""
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": text}],
    }
