"""Building the server events of `/v1/realtime`: the objects the OpenAI Realtime API's
events carry (session, items, responses, usage, errors) and the beta's event names.
`docs/protocol.md`, "OpenAI Realtime endpoint", lists which events are sent when.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from voxrelay.pipeline.realtime_config import VOICE, AudioFormat, RealtimeConfig, RealtimeError

# GA server event names -> the beta's, for a client that sent `OpenAI-Beta: realtime=v1`.
BETA_NAMES = {
    "conversation.item.added": "conversation.item.created",
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
}


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def session_object(config: RealtimeConfig, session_id: str, model: str) -> dict[str, Any]:
    """The `session` of session.created / session.updated: the configuration in effect."""
    detection = config.turn_detection
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": model,
        "output_modalities": ["audio"],
        "instructions": config.instructions,
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
        "audio": {
            "input": {
                "format": config.input_format.to_dict(),
                "transcription": {"model": "whisper"},  # the ASR's final: always on
                "noise_reduction": None,
                "turn_detection": None if detection is None else detection.to_dict(),
            },
            "output": {
                "format": config.output_format.to_dict(),
                "voice": config.voice,
                "speed": config.speed,
            },
        },
    }


def encode_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def message_item(item_id: str, role: str, transcript: str | None, status: str) -> dict[str, Any]:
    """A user's (input_audio) or the assistant's (output_audio) message item."""
    part = "input_audio" if role == "user" else "output_audio"
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": role,
        "status": status,
        "content": [{"type": part, "transcript": transcript}],
    }


def response_object(
    response_id: str,
    status: str,
    output: list[dict[str, Any]],
    audio_format: AudioFormat,
    reason: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    details = None if status == "in_progress" else {"type": status, "reason": reason}
    return {
        "id": response_id,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
        "output": output,
        "conversation_id": None,
        "output_modalities": ["audio"],
        "max_output_tokens": "inf",
        "audio": {"output": {"format": audio_format.to_dict(), "voice": VOICE}},
        "usage": usage,
        "metadata": None,
    }


def usage_of(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "total_tokens": input_tokens + output_tokens,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "input_token_details": {
            "text_tokens": input_tokens,
            "audio_tokens": 0,
            "cached_tokens": cached_tokens,
        },
        "output_token_details": {"text_tokens": output_tokens, "audio_tokens": 0},
    }


def error_object(
    error: RealtimeError, client_event_id: str | None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    """The `error` of an `error` event; `client_event_id`: the event that caused it."""
    return {
        "type": kind,
        "code": error.code,
        "message": error.message,
        "param": error.param,
        "event_id": client_event_id,
    }
