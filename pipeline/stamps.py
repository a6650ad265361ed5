"""What a stage's stamp writes into its turn's trace: one small function per kind.

A `Stamp` record's body is `STAMP_BODY` (the kind and one integer), then text (a
transcript, a reply, a token) or, for END_SCORED, an `END_SCORE` block. Kinds without a
writer of their own mark their moment (`TurnTrace.mark`: the first one wins). What the
session does for the client with a stamp (captions, barge-in, the commit gate) is
`pipeline.session`'s; this module only fills the row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from voxrelay.ipc.records import END_SCORE, STAMP_BODY, Record, Stamp
from voxrelay.pipeline.trace import TurnTrace


@dataclass(frozen=True, slots=True)
class StampRecord:
    """A STAMP record read: its kind, integer, text and when its stage stamped it."""

    turn_id: int
    stamp: Stamp
    value: int
    text: str
    stamped_ns: int
    payload: bytes  # the whole body: END_SCORE follows STAMP_BODY

    @classmethod
    def read(cls, record: Record) -> StampRecord:
        point, value = STAMP_BODY.unpack_from(record.payload)
        text = record.payload[STAMP_BODY.size :].decode("utf-8", errors="replace")
        return cls(record.turn_id, Stamp(point), value, text, record.stamp_ns, record.payload)


# Trace points of one attempt at the reply: a retracted speculative reply's successor
# stamps them again, and its moment replaces the retracted one's, even when it comes
# before the RESUME (pipeline.commit_gate.Retraction).
SPECULATIVE_STAMPS = (
    Stamp.SPECULATIVE_END,
    Stamp.LLM_START,
    Stamp.LLM_FIRST_TOKEN,
    Stamp.TTS_FIRST_AUDIO,
)


def _mark(trace: TurnTrace, stamp: StampRecord) -> None:
    trace.mark(stamp.stamp, stamp.stamped_ns)


def _latest(trace: TurnTrace, stamp: StampRecord) -> None:
    trace.stamps[stamp.stamp] = max(trace.stamps.get(stamp.stamp, 0), stamp.stamped_ns)


def _transcript(trace: TurnTrace, stamp: StampRecord) -> None:
    trace.transcript = stamp.text


def _reply_text(trace: TurnTrace, stamp: StampRecord) -> None:
    trace.reply_text = stamp.text


def _prefill(trace: TurnTrace, stamp: StampRecord) -> None:
    # value: the prompt's tokens prefilled; text: of those, prefilled while the user spoke
    trace.prefill_tokens = stamp.value
    trace.prefill_early_tokens = int(stamp.text) if stamp.text.isdigit() else 0


def _end_held(trace: TurnTrace, stamp: StampRecord) -> None:
    trace.end_holds += 1


def _end_scored(trace: TurnTrace, stamp: StampRecord) -> None:
    # value: the pause's wait in ms; the signals follow (NaN: that signal did not come)
    audio, text_prob, closing, end_prob, decision_ms = END_SCORE.unpack_from(
        stamp.payload, STAMP_BODY.size
    )
    trace.end_scores += 1
    trace.end_audio_prob = None if math.isnan(audio) else audio
    trace.end_text_prob = None if math.isnan(text_prob) else text_prob
    trace.end_closing_prob = None if math.isnan(closing) else closing
    trace.end_prob, trace.end_wait_ms, trace.end_decision_ms = end_prob, stamp.value, decision_ms


def _asr_final(trace: TurnTrace, stamp: StampRecord) -> None:
    # value: the final decode's time in us; text: the model that decoded it ("auto" picks
    # one per turn)
    trace.mark(stamp.stamp, stamp.stamped_ns)
    trace.asr_decode_ms = stamp.value / 1000
    trace.asr_model = stamp.text or trace.asr_model


def _agent_turn(trace: TurnTrace, stamp: StampRecord) -> None:
    trace.opening = True  # the agent's own turn: a reply is coming, no user words


_WRITERS: dict[Stamp, Callable[[TurnTrace, StampRecord], None]] = {
    Stamp.AGENT_TURN: _agent_turn,
    Stamp.TRANSCRIPT: _transcript,
    Stamp.REPLY_TEXT: _reply_text,
    Stamp.LLM_PREFILL: _prefill,
    Stamp.END_HELD: _end_held,
    Stamp.END_SCORED: _end_scored,
    Stamp.ASR_FINAL: _asr_final,
    **{speculative: _latest for speculative in SPECULATIVE_STAMPS},
}


def write_stamp(trace: TurnTrace, stamp: StampRecord) -> None:
    """Record `stamp` in its turn's `trace`."""
    _WRITERS.get(stamp.stamp, _mark)(trace, stamp)
