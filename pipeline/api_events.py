"""The events a `VoiceSession` yields (pipeline/api_session.py): small frozen dataclasses,
one per thing that happened in a turn, in the order they happened."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    """The user started speaking (turn `turn`)."""

    turn: int


@dataclass(frozen=True, slots=True)
class Transcript:
    """The words heard so far (`final=False`: words two decodes agree on) or in full."""

    turn: int
    text: str
    final: bool


@dataclass(frozen=True, slots=True)
class ReplyDelta:
    """The next piece of the reply's text, once the turn is committed."""

    turn: int
    text: str


@dataclass(frozen=True, slots=True)
class ReplyAudio:
    """A chunk of reply audio: mono PCM16 at `sample_rate`, in playing order."""

    turn: int
    pcm16: bytes
    sample_rate: int

    def samples(self) -> np.ndarray:
        """The chunk as an int16 array, (samples,)."""
        return np.frombuffer(self.pcm16, dtype="<i2")


@dataclass(frozen=True, slots=True)
class ReplyAudioDone:
    """The turn's reply audio is all delivered."""

    turn: int


@dataclass(frozen=True, slots=True)
class Interrupted:
    """Replies of turns before `turn` were cut (barge-in or `interrupt()`); their queued
    audio was dropped: stop playing what is left of them."""

    turn: int


@dataclass(frozen=True, slots=True)
class ReplyPaused:
    """The user's speech (turn `turn`) may cut the reply: hold its audio, play nothing.
    Only where the barge-in rule waits for words (`barge_in_min_words` > 0); what follows
    is `Interrupted` or `ReplyResumed`."""

    turn: int


@dataclass(frozen=True, slots=True)
class ReplyResumed:
    """Turn `turn`'s speech cut nothing (a backchannel, a cough): play the held audio on
    from where it stopped."""

    turn: int


@dataclass(frozen=True, slots=True)
class TurnError:
    """The turn failed (a stage crashed or hung); the next one works again."""

    turn: int
    message: str


@dataclass(frozen=True, slots=True)
class TurnDone:
    """The turn's latency trace, once its reply has played (1x from its first sample),
    was cut or failed; `trace` holds every field of docs/traces.md."""

    turn: int
    transcript: str
    reply_text: str
    ttfa_ms: float | None
    trace: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class InputEnded:
    """Every turn of the input before `end_input()` is done."""


Event = (
    SpeechStarted
    | Transcript
    | ReplyDelta
    | ReplyAudio
    | ReplyAudioDone
    | Interrupted
    | ReplyPaused
    | ReplyResumed
    | TurnError
    | TurnDone
    | InputEnded
)

# Sink.on_text kinds -> the event they become. "speech.held" and "response.text" (the
# whole reply, in TurnDone) are not events of their own.
TEXT_EVENTS: dict[str, Callable[[int, str], Event]] = {
    "speech.started": lambda turn, text: SpeechStarted(turn),
    "transcript.partial": lambda turn, text: Transcript(turn, text, final=False),
    "transcript.final": lambda turn, text: Transcript(turn, text, final=True),
    # a backchannel over a reply ("Mm-hmm."): final, and its TurnDone has no reply
    "transcript.backchannel": lambda turn, text: Transcript(turn, text, final=True),
    "response.text.delta": ReplyDelta,
    "response.audio.pause": lambda turn, text: ReplyPaused(turn),
    "response.audio.resume": lambda turn, text: ReplyResumed(turn),
}
# The kinds that carry no text (the others with none are left out: an empty delta).
TEXTLESS = frozenset({"speech.started", "response.audio.pause", "response.audio.resume"})
