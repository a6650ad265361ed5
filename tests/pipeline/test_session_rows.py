"""When a turn's trace row is written: after its reply has played, or at the cut."""

from __future__ import annotations

import time

from tests.pipeline.pipeline_thread import NullSink
from voxrelay.ipc.records import AUDIO_FORMAT, STAMP_BODY, Record, RecordKind, SampleFormat, Stamp
from voxrelay.pipeline.session import Session
from voxrelay.pipeline.trace import TraceSink, TurnTrace

RATE = 22_050


class RowSink(NullSink):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[TurnTrace] = []

    def on_turn_done(self, trace: TurnTrace) -> None:
        self.rows.append(trace)


def _reply(session: Session, seconds: float) -> int:
    """Turn 0's whole reply, committed, arriving at once (faster than it plays)."""
    session.deliver(Record(RecordKind.COMMIT, 0, 1, 0, 0, 0, b""))
    fragment = STAMP_BODY.pack(Stamp.FRAGMENT, int(RATE * seconds / 2)) + b"He was"
    session.deliver(Record(RecordKind.STAMP, 0, 1, 0, 0, 0, fragment))  # the rest lags
    pcm = bytes(2 * int(RATE * seconds))
    header = AUDIO_FORMAT.pack(RATE, 1, SampleFormat.PCM16)
    session.deliver(Record(RecordKind.AUDIO_OUT, 0, 1, 0, 0, 0, header + pcm))
    started = time.perf_counter_ns()
    session.deliver(Record(RecordKind.AUDIO_END, 0, 1, 0, 0, 0, b""))
    return started


def test_the_row_waits_for_the_reply_to_play() -> None:
    sink = RowSink()
    session = Session(1, sink, TraceSink(None), "file", "streaming")
    started = _reply(session, seconds=2.0)
    assert not sink.rows and session.replying(before_turn=1)  # its audio still plays
    session.settle(started + 1_000_000_000)  # one second in: still playing
    assert not sink.rows
    session.settle(started + 2_100_000_000)
    assert [row.turn_id for row in sink.rows] == [0] and not sink.rows[0].barge_in_ns


def test_a_cut_during_playback_marks_the_row_even_with_all_audio_delivered() -> None:
    sink = RowSink()
    session = Session(1, sink, TraceSink(None), "file", "streaming")
    started = _reply(session, seconds=2.0)
    cut_at = started + 1_500_000_000
    heard = session.new_turn(1, cut_at)
    # 1.5 s of 2: not fully played, although the fragments stamped so far (one, the first
    # second) would say so; the history gets what was heard.
    assert [turn for turn, _ in heard] == [0]
    assert [row.turn_id for row in sink.rows] == [0]
    assert sink.rows[0].barge_in_ns == cut_at and sink.rows[0].heard_text


def test_ended_input_and_closing_write_waiting_rows() -> None:
    sink = RowSink()
    session = Session(1, sink, TraceSink(None), "file", "streaming")
    _reply(session, seconds=5.0)
    assert not sink.rows
    session.flush()
    assert [row.turn_id for row in sink.rows] == [0]


def _stamp(session: Session, stamp: Stamp, text: str) -> None:
    body = STAMP_BODY.pack(stamp, 0) + text.encode()
    session.deliver(Record(RecordKind.STAMP, 0, 1, 0, time.perf_counter_ns(), 0, body))


def test_a_reply_cut_while_generating_keeps_the_text_it_had() -> None:
    """No whole reply text comes for a reply the cut aborted: its row keeps the deltas
    that had gone to the client, and only those of the committed attempt."""
    sink = RowSink()
    session = Session(1, sink, TraceSink(None), "file", "streaming")
    _stamp(session, Stamp.TRANSCRIPT, "Tell me a story.")
    _stamp(session, Stamp.REPLY_DELTA, "Never")  # speculative: held, then retracted
    session.deliver(Record(RecordKind.RESUME, 0, 1, 0, 0, time.perf_counter_ns(), b""))
    session.deliver(Record(RecordKind.COMMIT, 0, 1, 0, 0, 0, b""))
    for delta in [" Once", " upon", " a"]:
        _stamp(session, Stamp.REPLY_DELTA, delta)
    session.new_turn(1)
    assert [row.reply_text for row in sink.rows] == ["Once upon a"]
    assert sink.rows[0].barge_in_ns


def test_the_printed_trace_says_what_the_end_of_turn_waited() -> None:
    from voxrelay.pipeline.trace import format_trace

    row = {"endpoint_ms": 684.8, "ttfa_ms": 685.1, "end_wait_ms": 646, "end_prob": 0.637}
    assert format_trace(row) == "endpoint_ms=685ms  ttfa_ms=685ms  end_wait_ms=646ms  end_prob=0.64"
    # Null where no pause was scored (the "silence" rule, a typed turn): not printed.
    assert (
        format_trace({"ttfa_ms": 300.0, "end_wait_ms": None, "end_prob": None}) == "ttfa_ms=300ms"
    )
