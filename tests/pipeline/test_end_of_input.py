"""A record that ends a turn or a session on the audio ring (AUDIO_END, COMMIT,
END_OF_INPUT) reaches the session after whatever the stages wrote to their events rings
before it (the reply's text, stamps). The rings are read in any order, so without this a
row could lose its reply_text."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from ipc.channel import ChannelSpec, make_channel, open_receiver, open_sender
from ipc.records import STAMP_BODY, Record, RecordKind, Stamp
from pipeline.config import PipelineConfig
from pipeline.supervisor import LAST_WORDS, Supervisor


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


@pytest.mark.parametrize("last_word", sorted(LAST_WORDS), ids=lambda kind: kind.name)
def test_a_last_word_on_the_audio_ring_comes_after_the_events_written_before_it(
    last_word: RecordKind,
) -> None:
    """AUDIO_END ends a turn's row, COMMIT can release one (a reply TTS finished while
    it was speculative), END_OF_INPUT flushes the session: each is delivered after what
    the stages had written to their events rings, though the audio ring is read first."""
    seen: list[str] = []
    supervisor = Supervisor(PipelineConfig(), lambda stage, record: seen.append(record.kind.name))
    spec = ChannelSpec.parse(make_channel("shm", 1 << 16).encode())
    events, llm = open_receiver(spec), open_sender(spec)
    supervisor._stages["llm"] = SimpleNamespace(name="llm", events=events)  # type: ignore[assignment]
    tts = open_sender(ChannelSpec.parse(supervisor._links["tts"][1].encode()))
    tts.send(RecordKind.AUDIO_OUT, b"\0\0", session_id=1)
    llm.send(RecordKind.STAMP, STAMP_BODY.pack(Stamp.REPLY_TEXT, 0), b"hello", session_id=1)
    tts.send(last_word, session_id=1)
    supervisor._drain("tts", supervisor.audio_out)
    assert seen == ["AUDIO_OUT", "STAMP", last_word.name]
    for channel in (tts, llm, events):
        channel.close()
