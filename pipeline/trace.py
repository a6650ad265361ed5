"""Per-utterance latency traces: stamps from every stage, derived milliseconds, JSONL.

All stamps are `time.perf_counter_ns()` (CLOCK_MONOTONIC, shared by all processes on
the host), taken where a record crosses a stage boundary. TTFA is the first reply
sample leaving the pipeline minus the end of the user's speech.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from voxrelay.ipc.records import Stamp

log = logging.getLogger("voxrelay.trace")

# (field name, stamp) for the timestamps a trace reports.
_STAMP_FIELDS: tuple[tuple[str, Stamp], ...] = (
    ("speech_start_ns", Stamp.SPEECH_START),
    ("speech_end_ns", Stamp.SPEECH_END),
    ("speculative_end_ns", Stamp.SPECULATIVE_END),
    ("asr_final_ns", Stamp.ASR_FINAL),
    ("llm_start_ns", Stamp.LLM_START),
    ("llm_first_token_ns", Stamp.LLM_FIRST_TOKEN),
    ("llm_done_ns", Stamp.LLM_DONE),
    ("tts_first_audio_ns", Stamp.TTS_FIRST_AUDIO),
    ("tts_done_ns", Stamp.TTS_DONE),
)

# (derived name, later stamp field, earlier stamp field)
_DERIVED: tuple[tuple[str, str, str], ...] = (
    ("endpoint_ms", "asr_final_ns", "speech_end_ns"),
    ("speculative_ms", "speculative_end_ns", "speech_end_ns"),
    ("llm_ttft_ms", "llm_first_token_ns", "llm_start_ns"),
    ("tts_first_audio_ms", "tts_first_audio_ns", "llm_first_token_ns"),
    ("out_ms", "first_audio_out_ns", "tts_first_audio_ns"),
    ("ttfa_ms", "first_audio_out_ns", "speech_end_ns"),
    ("llm_total_ms", "llm_done_ns", "llm_start_ns"),
)

# (stage name, start field, end field): the intervals of a turn that reports and spans
# draw, each present when both of its stamps are. Playback is `playback_interval`.
STAGE_INTERVALS: tuple[tuple[str, str, str], ...] = (
    ("user.speech", "speech_start_ns", "speech_end_ns"),
    ("asr.endpointing", "speech_end_ns", "asr_final_ns"),
    ("llm.ttft", "llm_start_ns", "llm_first_token_ns"),
    ("llm.decode", "llm_first_token_ns", "llm_done_ns"),
    ("tts.first_audio", "llm_first_token_ns", "tts_first_audio_ns"),
    ("tts.synthesis", "tts_first_audio_ns", "tts_done_ns"),
    ("pipeline.out", "tts_first_audio_ns", "first_audio_out_ns"),
)


def stage_intervals(row: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(stage, start ns, end ns) of a trace row: the stages it reached, then playback."""
    found = []
    for name, first, last in STAGE_INTERVALS:
        begin, end = row.get(first), row.get(last)
        if begin and end and end >= begin:
            found.append((name, begin, end))
    first_out = row.get("first_audio_out_ns")
    played_ms = row.get("audio_played_ms") or 0.0
    if first_out and played_ms > 0:
        # The sink plays at 1x from the first sample on.
        found.append(("playback", first_out, first_out + int(played_ms * 1e6)))
    return found


@dataclass(slots=True)
class TurnTrace:
    session_id: int
    turn_id: int
    transport: str
    mode: str
    stamps: dict[Stamp, int] = field(default_factory=dict)
    first_audio_out_ns: int = 0
    audio_out_samples: int = 0
    audio_out_rate: int = 0
    transcript: str = ""
    reply_text: str = ""
    # The reply's text as it went to the client: a reply cut while still generating
    # never gets its whole text, so its row keeps what had been generated.
    reply_deltas: list[str] = field(default_factory=list, repr=False)
    prefill_tokens: int = 0
    prefill_early_tokens: int = 0  # of those, prefilled while the user was speaking
    asr_decode_ms: float = 0.0
    error: str = ""
    barge_in_ns: int = 0  # the user spoke over this turn's reply: it was cut here
    heard_text: str = ""  # of a cut reply: what the user heard (the LLM's history keeps it)
    # The cut came from the user going on within continue_turn_ms of this turn's end: the
    # LLM answers this turn's words and the next turn's as one user turn.
    continued: bool = False
    # a listener's "mm-hmm" or "yeah" over a reply (pipeline/barge_in.py): it cut nothing
    # and got no reply
    backchannel: bool = False
    # the agent's own turn, with no user words: the greeting, or Pipeline.say later
    opening: bool = False
    speculative_retracts: int = 0  # speculative replies dropped (the user spoke on)
    end_holds: int = 0  # pauses that waited longer: the words stopped mid-sentence
    # The learned end of turn's last scored pause (asr/turn_end.py): the one that ended it.
    end_scores: int = 0
    end_prob: float | None = None
    end_audio_prob: float | None = None
    end_text_prob: float | None = None
    end_closing_prob: float | None = None  # Whisper's P(the sentence closes), asr/textdecoder.py
    end_wait_ms: int | None = None
    end_decision_ms: float | None = None
    asr_model: str = ""
    llm_model: str = ""
    tts_voice: str = ""
    dtmf: str = ""  # key presses (RFC 4733, AudioSocket) that went with this turn, in order
    dtmf_first_ns: int = 0  # when the first of them arrived

    def add_dtmf(self, digits: str, at_ns: int) -> None:
        self.dtmf += digits
        self.dtmf_first_ns = min(self.dtmf_first_ns or at_ns, at_ns)

    def mark(self, point: Stamp, at_ns: int) -> None:
        # The first stamp of a kind wins: a retried stage must not move it later.
        self.stamps.setdefault(point, at_ns)

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "session": self.session_id,
            "turn": self.turn_id,
            "transport": self.transport,
            "mode": self.mode,
            "asr_model": self.asr_model,
            "llm_model": self.llm_model,
            "tts_voice": self.tts_voice,
        }
        for name, point in _STAMP_FIELDS:
            row[name] = self.stamps.get(point)
        row["first_audio_out_ns"] = self.first_audio_out_ns or None
        for name, later, earlier in _DERIVED:
            a, b = row.get(later), row.get(earlier)
            row[name] = round((a - b) / 1e6, 2) if a and b else None
        row["audio_out_ms"] = (
            round(1000 * self.audio_out_samples / self.audio_out_rate, 1)
            if self.audio_out_rate
            else 0.0
        )
        row["audio_played_ms"] = row["audio_out_ms"]
        if self.barge_in_ns and self.first_audio_out_ns:
            # The sink plays at 1x from the first sample: the cut ends what was heard.
            heard_ms = max(0.0, (self.barge_in_ns - self.first_audio_out_ns) / 1e6)
            row["audio_played_ms"] = round(min(row["audio_out_ms"], heard_ms), 1)
        row["asr_decode_ms"] = round(self.asr_decode_ms, 2)
        row["prefill_tokens"] = self.prefill_tokens
        row["prefill_early_tokens"] = self.prefill_early_tokens
        row["prefill_late_tokens"] = self.prefill_tokens - self.prefill_early_tokens
        row["transcript"] = self.transcript
        row["reply_text"] = self.reply_text
        row["barge_in_ns"] = self.barge_in_ns or None
        row["heard_text"] = self.heard_text or None
        row["continued"] = self.continued
        row["backchannel"] = self.backchannel
        row["opening"] = self.opening
        row["speculative_retracts"] = self.speculative_retracts
        row["end_holds"] = self.end_holds
        row["end_scores"] = self.end_scores
        row["end_prob"] = _rounded(self.end_prob, 4)
        row["end_audio_prob"] = _rounded(self.end_audio_prob, 4)
        row["end_text_prob"] = self.end_text_prob
        row["end_closing_prob"] = _rounded(self.end_closing_prob, 4)
        row["end_wait_ms"] = self.end_wait_ms
        row["end_decision_ms"] = _rounded(self.end_decision_ms, 2)
        row["error"] = self.error or None
        row["dtmf"] = self.dtmf or None
        row["dtmf_first_ns"] = self.dtmf_first_ns or None
        return row


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


TraceObserver = Callable[[dict[str, Any]], None]


class TraceSink:
    """Appends one JSON line per finished utterance (a no-op without a path) and hands the
    same row to each observer (Prometheus metrics, OpenTelemetry export)."""

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = path.open("a", encoding="utf-8") if path else None
        self.observers: list[TraceObserver] = []

    def write(self, trace: TurnTrace) -> None:
        row = trace.to_dict()
        if self._file is not None:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        for observer in self.observers:
            try:
                observer(row)
            except Exception:  # telemetry must never cost a turn: log and go on
                log.exception("trace observer %r failed", observer)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def format_trace(row: dict[str, Any]) -> str:
    """A short human-readable waterfall of one trace row, and the learned end's wait after
    the last word with the P(end of turn) that set it: most of `endpoint_ms`."""
    parts = [f"{name}={row[name]:.0f}ms" for name, _, _ in _DERIVED if row.get(name) is not None]
    if row.get("end_wait_ms") is not None:
        parts.append(f"end_wait_ms={row['end_wait_ms']}ms")
    if row.get("end_prob") is not None:
        parts.append(f"end_prob={row['end_prob']:.2f}")
    return "  ".join(parts)
