"""END_OF_INPUT is a session's last word: whatever the stages wrote to their events rings
before it (the reply's text, stamps) reaches the session before its rows are flushed.
The rings are read in any order, so without this a row could lose its reply_text."""

from __future__ import annotations

import time
from types import SimpleNamespace

from ipc.channel import ChannelSpec, make_channel, open_receiver, open_sender
from ipc.records import STAMP_BODY, Record, RecordKind, Stamp
from pipeline.config import PipelineConfig
from pipeline.run import Pipeline
from pipeline.supervisor import Supervisor
from tests.pipeline.pipeline_thread import NullSink


def test_drain_events_delivers_what_a_stage_already_wrote() -> None:
    seen: list[tuple[str, Stamp, bytes]] = []

    def on_record(stage: str, record: Record) -> None:
        point, _ = STAMP_BODY.unpack_from(record.payload)
        seen.append((stage, Stamp(point), record.payload[STAMP_BODY.size :]))

    supervisor = Supervisor(PipelineConfig(), on_record)
    spec = ChannelSpec.parse(make_channel("shm", 1 << 16).encode())
    events, llm = open_receiver(spec), open_sender(spec)
    supervisor._stages["llm"] = SimpleNamespace(name="llm", events=events)  # type: ignore[assignment]
    llm.send(RecordKind.STAMP, STAMP_BODY.pack(Stamp.REPLY_TEXT, 0), b"hello", session_id=1)
    deadline = time.monotonic() + 2
    while not seen and time.monotonic() < deadline:
        supervisor.drain_events()
    assert seen == [("llm", Stamp.REPLY_TEXT, b"hello")]
    llm.close()
    events.close()


def test_end_of_input_drains_the_events_rings_before_the_rows_are_flushed() -> None:
    pipeline = Pipeline(PipelineConfig())
    session = pipeline.router.open(NullSink())
    order: list[str] = []
    pipeline.supervisor.drain_events = lambda: order.append("events")  # type: ignore[method-assign]
    session.flush = lambda: order.append("rows")  # type: ignore[method-assign]
    pipeline._on_record(
        "tts",
        Record(RecordKind.END_OF_INPUT, 0, session.session_id, 0, time.perf_counter_ns(), 0, b""),
    )
    assert order == ["events", "rows"]
