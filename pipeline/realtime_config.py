"""The session configuration of `/v1/realtime` and its validation: what a Realtime
`session.update` may set, in the GA's nesting or the beta's flat names.

Parsing never half-applies: `apply_update` builds a whole new `RealtimeConfig` or raises
`RealtimeError`, which becomes an `error` event carrying the client event's id
(`pipeline/realtime.py`; `docs/protocol.md`, "OpenAI Realtime endpoint").
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, replace
from typing import Any

from voxrelay.pipeline.config import check_instructions
from voxrelay.pipeline.sip import g711

SPEEDS = (0.5, 1.5)  # Realtime allows 0.25..1.5, the voice 0.5..2.0: what both can do
EAGERNESS = ("low", "medium", "high", "auto")
VOICE = "en_US-joe-medium"  # the one voice: any voice name a client asks for speaks as it
# GA and beta names of the audio formats: (GA type, rate, G.711 codec or None)
_FORMATS: dict[str, tuple[str, int, str | None]] = {
    "audio/pcm": ("audio/pcm", 24_000, None),
    "pcm16": ("audio/pcm", 24_000, None),
    "audio/pcmu": ("audio/pcmu", 8_000, "PCMU"),
    "g711_ulaw": ("audio/pcmu", 8_000, "PCMU"),
    "audio/pcma": ("audio/pcma", 8_000, "PCMA"),
    "g711_alaw": ("audio/pcma", 8_000, "PCMA"),
}
# Session fields a client may send that change nothing here (docs/protocol.md says why).
_IGNORED = frozenset(
    (  # noqa: SIM905
        "type model include tracing truncation prompt max_output_tokens max_response_output_tokens"
        " temperature tool_choice input_audio_transcription input_audio_noise_reduction reasoning"
        " parallel_tool_calls client_secret id object expires_at"
    ).split()
)


class RealtimeError(ValueError):
    """A client event that cannot be applied: becomes an `invalid_request_error`."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class AudioFormat:
    type: str = "audio/pcm"
    rate: int = 24_000
    codec: str | None = None  # "PCMU" / "PCMA" for G.711

    def decode(self, payload: bytes) -> bytes:
        """Client audio -> PCM16 at `rate`."""
        if self.codec is not None:
            return g711.decode(payload, self.codec)
        if len(payload) % 2:
            raise RealtimeError(
                "invalid_value", f"audio/pcm is 16-bit: got an odd {len(payload)} bytes", "audio"
            )
        return payload

    def encode(self, pcm16: bytes) -> bytes:
        return pcm16 if self.codec is None else g711.encode(pcm16, self.codec)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "rate": self.rate} if self.codec is None else {"type": self.type}


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """Server-side turn detection; `RealtimeConfig.turn_detection` None: the client commits."""

    type: str = "server_vad"  # or "semantic_vad"
    eagerness: str = "auto"
    silence_duration_ms: int | None = None  # None: the ASR's own end of turn
    interrupt_response: bool = True

    def to_dict(self) -> dict[str, Any]:
        shape: dict[str, Any] = {"type": self.type, "create_response": True}
        shape["interrupt_response"] = self.interrupt_response
        if self.type == "semantic_vad":
            shape["eagerness"] = self.eagerness
        else:
            shape["silence_duration_ms"] = self.silence_duration_ms
        return shape


def turn_taking(detection: TurnDetection) -> tuple[str, int | None]:
    """(eagerness, fallback_ms) for `Pipeline.set_turn_taking`: semantic_vad's eagerness
    ("auto" is "medium", as the API defines it); server_vad's silence_duration_ms as the
    silence that ends a turn whatever its words."""
    if detection.type == "semantic_vad":
        return ("medium" if detection.eagerness == "auto" else detection.eagerness), None
    return "medium", detection.silence_duration_ms


@dataclass(frozen=True, slots=True)
class RealtimeConfig:
    """One Realtime session's settings, as `session.updated` reports them."""

    instructions: str = ""
    input_format: AudioFormat = AudioFormat()
    output_format: AudioFormat = AudioFormat()
    turn_detection: TurnDetection | None = TurnDetection()
    speed: float = 1.0
    voice: str = VOICE


def _object(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RealtimeError("invalid_type", f"'{param}' must be an object", param)
    return value


def _format(value: Any, param: str) -> AudioFormat:
    name = value.get("type") if isinstance(value, dict) else value
    if name not in _FORMATS:
        supported = "'audio/pcm' (24 kHz), 'audio/pcmu', 'audio/pcma'"
        raise RealtimeError(
            "invalid_value", f"unsupported {param} {name!r}; use {supported}", param
        )
    kind, rate, codec = _FORMATS[name]
    asked = value.get("rate", rate) if isinstance(value, dict) else rate
    if asked != rate:
        raise RealtimeError("invalid_value", f"{kind} is {rate} Hz here, not {asked!r}", param)
    return AudioFormat(kind, rate, codec)


def _detection(value: Any, param: str) -> TurnDetection | None:
    if value is None:
        return None
    value = _object(value, param)
    kind = value.get("type", "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise RealtimeError(
            "invalid_value",
            f"{param}.type must be server_vad or semantic_vad (or {param}: null), got {kind!r}",
            f"{param}.type",
        )
    if value.get("create_response", True) is not True:
        raise RealtimeError(
            "unsupported_value",
            "create_response: false is not supported: the pipeline answers every turn it commits",
            f"{param}.create_response",
        )
    eagerness = value.get("eagerness", "auto")
    if eagerness not in EAGERNESS:
        raise RealtimeError(
            "invalid_value",
            f"eagerness must be one of {EAGERNESS}, got {eagerness!r}",
            f"{param}.eagerness",
        )
    silence = value.get("silence_duration_ms")
    if silence is not None and (
        not isinstance(silence, int) or isinstance(silence, bool) or not 100 <= silence <= 10_000
    ):
        raise RealtimeError(
            "invalid_value",
            f"silence_duration_ms must be an integer from 100 to 10000, got {silence!r}",
            f"{param}.silence_duration_ms",
        )
    interrupt = value.get("interrupt_response", True)
    if not isinstance(interrupt, bool):
        raise RealtimeError(
            "invalid_type", "interrupt_response must be a boolean", f"{param}.interrupt_response"
        )
    return TurnDetection(kind, eagerness, silence, interrupt)


def apply_update(config: RealtimeConfig, session: Any) -> RealtimeConfig:
    """`config` with a `session.update`'s `session` applied (GA nesting or beta's flat
    names); raises RealtimeError and changes nothing if any field is bad."""
    session = _object(session, "session")
    if session.get("type", "realtime") != "realtime":
        raise RealtimeError(
            "invalid_value",
            "only realtime sessions are served here (not transcription)",
            "session.type",
        )
    changes: dict[str, Any] = {}
    audio = _object(session.get("audio", {}), "session.audio")
    audio_in = _object(audio.get("input", {}), "session.audio.input")
    audio_out = _object(audio.get("output", {}), "session.audio.output")
    flat = {
        "input_format": ("input_audio_format", audio_in, "format", "session.audio.input.format"),
        "output_format": (
            "output_audio_format",
            audio_out,
            "format",
            "session.audio.output.format",
        ),
    }
    for field, (beta, nested, key, param) in flat.items():
        if key in nested or beta in session:
            changes[field] = _format(nested.get(key, session.get(beta)), param)
    if "turn_detection" in audio_in or "turn_detection" in session:
        param = "session.audio.input.turn_detection"
        value = (
            audio_in["turn_detection"]
            if "turn_detection" in audio_in
            else session["turn_detection"]
        )
        changes["turn_detection"] = _detection(value, param)
    if "instructions" in session:
        try:
            changes["instructions"] = check_instructions(session["instructions"])
        except (TypeError, ValueError) as exc:
            raise RealtimeError("invalid_value", str(exc), "session.instructions") from None
    speed = audio_out.get("speed", session.get("speed"))
    if speed is not None:
        low, high = SPEEDS
        if (
            isinstance(speed, bool)
            or not isinstance(speed, int | float)
            or not low <= speed <= high
        ):
            raise RealtimeError(
                "invalid_value",
                f"speed must be a number from {low} to {high}, got {speed!r}",
                "session.audio.output.speed",
            )
        changes["speed"] = float(speed)
    voice = audio_out.get("voice", session.get("voice"))
    if voice is not None and not isinstance(voice, str):
        raise RealtimeError("invalid_type", "voice must be a string", "session.audio.output.voice")
    modalities = session.get("output_modalities", session.get("modalities", ["audio"]))
    if not isinstance(modalities, list) or "audio" not in modalities:
        raise RealtimeError(
            "unsupported_value",
            "replies are spoken: output_modalities must include 'audio'",
            "session.output_modalities",
        )
    if session.get("tools"):
        raise RealtimeError("unsupported_value", "tools are not supported", "session.tools")
    known = {
        "audio",
        "input_audio_format",
        "output_audio_format",
        "turn_detection",
        "voice",
        "instructions",
        "speed",
        "output_modalities",
        "modalities",
        "tools",
    }
    for name in session:
        if name not in known and name not in _IGNORED:
            raise RealtimeError(
                "unknown_parameter", f"unknown parameter 'session.{name}'", f"session.{name}"
            )
    return replace(config, **changes)


def decode_base64(text: Any, param: str = "audio") -> bytes:
    if not isinstance(text, str):
        raise RealtimeError("invalid_type", f"'{param}' must be a base64 string", param)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeError(
            "invalid_value", f"'{param}' is not valid base64-encoded audio", param
        ) from None
