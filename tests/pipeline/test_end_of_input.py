"""A record that ends a turn or a session on the audio ring (AUDIO_END, COMMIT,
END_OF_INPUT) reaches the session after whatever the stages wrote to their events rings
before it (the reply's text, stamps). The rings are read in any order, so without this a
row could lose its reply_text. A barge-in, decided on the ASR's events, reads the TTS's
before it maps the audio played to the words heard."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tests.pipeline.pipeline_thread import NullSink
from voxrelay.ipc.channel import (
    ChannelSpec,
    Receiver,
    Sender,
    make_channel,
    open_receiver,
    open_sender,
)
from voxrelay.ipc.records import (
    AUDIO_FORMAT,
    STAMP_BODY,
    ControlOp,
    Record,
    RecordKind,
    SampleFormat,
    Stamp,
)
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.supervisor import LAST_WORDS, Supervisor


def _events_ring(supervisor: Supervisor, stage: str) -> tuple[Sender, Receiver]:
    """A stand-in for `stage`'s events ring: what the test sends on the first, the
    supervisor reads from the second."""
    spec = ChannelSpec.parse(make_channel("shm", 1 << 16).encode())
    sender, events = open_sender(spec), open_receiver(spec)
    supervisor._stages[stage] = SimpleNamespace(name=stage, events=events)  # type: ignore[assignment]
    return sender, events


def test_drain_events_delivers_what_a_stage_already_wrote() -> None:
    seen: list[tuple[str, Stamp, bytes]] = []

    def on_record(stage: str, record: Record) -> None:
        point, _ = STAMP_BODY.unpack_from(record.payload)
        seen.append((stage, Stamp(point), record.payload[STAMP_BODY.size :]))

    supervisor = Supervisor(PipelineConfig(), on_record)
    llm, events = _events_ring(supervisor, "llm")
    llm.send(RecordKind.STAMP, STAMP_BODY.pack(Stamp.REPLY_TEXT, 0), b"hello", session_id=1)
    deadline = time.monotonic() + 2
    while not seen and time.monotonic() < deadline:
        supervisor.drain_events()
    assert seen == [("llm", Stamp.REPLY_TEXT, b"hello")]
    llm.close()
    events.close()


@pytest.mark.parametrize("last_word", sorted(LAST_WORDS), ids=lambda kind: kind.name)
def test_a_last_word_on_the_audio_ring_comes_after_the_events_written_before_it(
    last_word: RecordKind,
) -> None:
    """AUDIO_END ends a turn's row, COMMIT can release one (a reply TTS finished while
    it was speculative), END_OF_INPUT flushes the session: each is delivered after what
    the stages had written to their events rings, though the audio ring is read first."""
    seen: list[str] = []
    supervisor = Supervisor(PipelineConfig(), lambda stage, record: seen.append(record.kind.name))
    llm, events = _events_ring(supervisor, "llm")
    tts = open_sender(ChannelSpec.parse(supervisor._links["tts"][1].encode()))
    tts.send(RecordKind.AUDIO_OUT, b"\0\0", session_id=1)
    llm.send(RecordKind.STAMP, STAMP_BODY.pack(Stamp.REPLY_TEXT, 0), b"hello", session_id=1)
    tts.send(last_word, session_id=1)
    supervisor._drain("tts", supervisor.audio_out)
    assert seen == ["AUDIO_OUT", "STAMP", last_word.name]
    for channel in (tts, llm, events):
        channel.close()


def test_a_barge_in_reads_the_tts_fragments_before_it_maps_what_was_heard() -> None:
    """What the user heard of a cut reply is mapped to words by the TTS's FRAGMENT stamps
    (pipeline/heard.py); the cut is decided on the ASR's events, so stamps the TTS wrote
    before it may still wait in its ring. Without reading them the LLM would keep "…"
    (nothing heard) for a reply that played for 0.3 s."""
    pipeline = Pipeline(PipelineConfig())
    session = pipeline.router.open(NullSink())
    tts, events = _events_ring(pipeline.supervisor, "tts")
    heard: list[bytes] = []

    def control(op: ControlOp, *_: object, text: bytes = b"", **__: object) -> None:
        if op == ControlOp.HEARD:
            heard.append(text)

    pipeline.supervisor.control = control  # type: ignore[method-assign]

    def deliver(kind: RecordKind, payload: bytes = b"") -> None:
        record = Record(kind, 0, session.session_id, 0, time.perf_counter_ns(), 0, payload)
        pipeline._on_record("llm", record)

    deliver(RecordKind.STAMP, STAMP_BODY.pack(Stamp.TRANSCRIPT, 0) + b"Say hello.")
    deliver(RecordKind.COMMIT)
    audio = AUDIO_FORMAT.pack(22050, 1, SampleFormat.PCM16) + bytes(2 * 22050)
    deliver(RecordKind.AUDIO_OUT, audio)  # one second of reply audio, playing from now
    text = b"Hello there, my good friend."
    fragment = STAMP_BODY.pack(Stamp.FRAGMENT, 22050)
    tts.send(RecordKind.STAMP, fragment, text, session_id=session.session_id)
    time.sleep(0.3)
    pipeline.new_turn(session.session_id, 1)
    assert len(heard) == 1 and heard[0].startswith(b"Hello") and heard[0].endswith("…".encode())
    tts.close()
    events.close()
