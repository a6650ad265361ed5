"""Events an ASRStream emits. All timestamps are `time.perf_counter_ns()` values.

Per utterance the order is: SpeechStart, then any of Partial / SpeculativeEnd / Resume / Hold /
EndScored,
then exactly one of Final (words were heard) or Discard (the VAD fired but Whisper heard
no words: noise, a cough). A SpeculativeEnd is always followed by Resume or by the Final.
Stable words are never revised silently: when the transcript of a SpeculativeEnd or
Final disagrees with words a Partial sent as stable, a Rollback comes right before it.
A typed turn (`ASRStream.text_turn`) is a SpeechStart with `typed` set, then its Final
(model TYPED, no decode).
"""

from __future__ import annotations

from dataclasses import dataclass

# The `model` of a typed turn's Final: no Whisper model heard it.
TYPED = "typed"


@dataclass(frozen=True, slots=True)
class SpeechStart:
    utterance_id: int
    start_ns: int  # arrival time of the first voiced sample
    typed: bool = False  # a turn the user typed (ASRStream.text_turn): no audio


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """The agent speaks now (ASRStream.agent_turn): the turn is numbered like an
    utterance, and its reply is the agent's own (the LLM's GREET)."""

    utterance_id: int
    text: str  # spoken as written (verbatim), else this reply's instructions ("": none)
    verbatim: bool


@dataclass(frozen=True, slots=True)
class Partial:
    utterance_id: int
    stable: str  # words two consecutive decodes agreed on; only ever grows
    unstable: str  # rest of the latest decode; may change


@dataclass(frozen=True, slots=True)
class Rollback:
    utterance_id: int
    stable: str  # the stable prefix that still holds: a prefix of what Partials sent


@dataclass(frozen=True, slots=True)
class SpeculativeEnd:
    utterance_id: int
    text: str
    speech_end_ns: int


@dataclass(frozen=True, slots=True)
class Resume:
    utterance_id: int  # speech came back after a SpeculativeEnd: drop speculative work


@dataclass(frozen=True, slots=True)
class Hold:
    utterance_id: int  # the words so far stop mid-sentence: this pause ends the turn later


@dataclass(frozen=True, slots=True)
class EndScored:
    """A learned end of turn decided this pause (asr/turn_end.py): it ends the turn at
    once (wait_ms 0) or once the silence reaches wait_ms."""

    utterance_id: int
    audio_prob: float | None  # Smart Turn (None unless turn_audio_model = "smart-turn")
    text_prob: float | None  # the LLM's P(<|im_end|>); None when it did not come in time
    closing_prob: float | None  # Whisper's P(the sentence closes); None: CTranslate2 decoded
    end_prob: float  # the fused probability
    wait_ms: int
    decision_ms: float  # CPU time of the decision in this process (Smart Turn if run + fusion)


@dataclass(frozen=True, slots=True)
class Final:
    utterance_id: int
    text: str
    speech_end_ns: int  # arrival time of the last voiced sample
    decode_ms: float  # Whisper time of the decode whose text this is (it may have been reused)
    model: str  # the Whisper model that decoded the utterance ("tiny.en", "base")


@dataclass(frozen=True, slots=True)
class Discard:
    utterance_id: int  # utterance closed without words; no Final follows


ASREvent = (
    SpeechStart | Partial | Rollback | SpeculativeEnd | Resume | Hold | EndScored | Final | Discard
)
