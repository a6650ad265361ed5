"""Speculative replies: started at the ASR's SpeculativeEnd, heard only once committed."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.asr.clipdata import voiced_span
from tests.pipeline.pipeline_thread import NullSink
from voxrelay.ipc.records import STAMP_BODY, Record, RecordKind, Stamp
from voxrelay.pipeline.audio_io import Clip, read_clip
from voxrelay.pipeline.commit_gate import CommitGate
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.session import Session
from voxrelay.pipeline.trace import TraceSink


def test_gate_holds_until_commit_and_drops_on_retract() -> None:
    gate = CommitGate()
    out: list[str] = []
    gate.hold(3, lambda: out.append("a"))
    gate.hold(3, lambda: out.append("b"))
    assert not gate.admits(3) and gate.held(3) == 2 and out == []
    assert gate.retract(3) == 2  # the user spoke on: nothing of it is ever heard
    gate.hold(3, lambda: out.append("c"))
    for release in gate.commit(3):
        release()
    assert out == ["c"] and gate.admits(3) and gate.held(3) == 0
    gate.hold(5, lambda: out.append("d"))
    gate.forget_before(6)
    assert not gate.admits(3) and gate.held(5) == 0


def _trimmed(clip: Clip) -> Clip:
    """The clip's speech with 100 ms of its own room tone on both sides."""
    first, last = voiced_span(clip.mono_float())
    return Clip(clip.pcm16[max(first - 1600, 0) : last + 1600], clip.sample_rate, 1)


@pytest.mark.slow
def test_pause_between_phrases_retracts_the_speculative_reply(clips_dir) -> None:
    """A ~500 ms pause (300 ms of silence between the clips' quiet edges) is long
    enough for a SpeculativeEnd (150 ms) and, with the end of turn at 800 ms here, too
    short to end the turn: the reply started at the pause is dropped unheard, and the one turn's
    reply answers both phrases."""
    first = _trimmed(read_clip(clips_dir / "goforward.raw"))
    second = _trimmed(read_clip(clips_dir / "cards/003.wav"))
    gap = np.zeros(int(0.3 * 16_000), np.int16)
    speech = Clip(np.concatenate([first.pcm16, gap, second.pcm16]), 16_000, 1)

    async def scenario():
        # The silence rule at 800 ms: the learned end may end a turn at a 500 ms pause
        # after whole words ("Go forward 10 meters" is one), which is not under test here.
        config = PipelineConfig(asr={"turn_detection": "silence", "end_silence_ms": 800})
        async with Pipeline(config) as pipeline:
            await pipeline.run_clip(first.with_silence(1.0))  # warm-up: one normal turn
            return await pipeline.run_clip(speech.with_silence(1.0))

    result = asyncio.run(scenario())
    assert not result.errors, result.errors
    assert len(result.traces) == 1, [t.transcript for t in result.traces]
    row = result.traces[0].to_dict()
    assert "forward" in row["transcript"].lower() and "club" in row["transcript"].lower()
    assert row["speculative_retracts"] >= 1, row
    # What was heard is the committed reply: it started after the retracted one ended.
    assert row["asr_final_ns"] < row["first_audio_out_ns"]
    assert row["speech_end_ns"] < row["llm_start_ns"]
    assert len(result.audio) > 0 and row["reply_text"]


def _stamp(point: Stamp, text: str, at_ns: int, value: int = 0) -> Record:
    return Record(
        RecordKind.STAMP, 0, 1, 0, at_ns, 0, STAMP_BODY.pack(point, value) + text.encode()
    )


def test_tts_stamps_of_a_retracted_attempt_that_arrive_late_are_dropped() -> None:
    """Stamps and audio travel on different rings: a FRAGMENT the TTS stamped before it
    passed the RESUME on can reach the session after it. It must not be taken for a
    fragment of the next attempt (it would shift what a barge-in says was heard)."""
    session = Session(1, NullSink(), TraceSink(None), "file", "streaming")
    session.deliver(Record(RecordKind.RESUME, 0, 1, 0, 1_000, 0, b""))
    session.deliver(_stamp(Stamp.TTS_FIRST_AUDIO, "", 900))
    session.deliver(_stamp(Stamp.FRAGMENT, "The retracted one,", 950, value=4410))
    assert 0 not in session.playbacks and Stamp.TTS_FIRST_AUDIO not in session.trace(0).stamps
    session.deliver(_stamp(Stamp.TTS_FIRST_AUDIO, "", 1_100))
    session.deliver(_stamp(Stamp.FRAGMENT, "The committed one.", 1_200, value=6615))
    assert session.playbacks[0].fragments == [("The committed one.", 6615)]
    assert session.trace(0).stamps[Stamp.TTS_FIRST_AUDIO] == 1_100


class _TextSink(NullSink):
    def __init__(self) -> None:
        self.deltas: list[str] = []

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        if kind == "response.text.delta":
            self.deltas.append(text)


def test_the_next_attempts_stamps_and_text_may_come_before_the_resume() -> None:
    """A final transcript that differs from the speculative one: the LLM retracts the
    reply and starts the next at once. The next one's stamps and live text come on the
    LLM's events ring and can reach the session before the RESUME, which waits in TTS
    behind the retracted reply's audio: they are kept, the retracted one's dropped,
    whenever they arrive (the RESUME's origin stamp is the moment of the retraction)."""
    sink = _TextSink()
    session = Session(1, sink, TraceSink(None), "file", "streaming")
    session.deliver(_stamp(Stamp.LLM_START, "", 100))
    session.deliver(_stamp(Stamp.REPLY_DELTA, "Old", 110))
    session.deliver(_stamp(Stamp.LLM_START, "", 210))  # the next attempt, retracted at 200
    session.deliver(_stamp(Stamp.REPLY_DELTA, "New", 220))
    session.deliver(Record(RecordKind.RESUME, 0, 1, 0, 300, 200, b""))  # left TTS at 300
    session.deliver(_stamp(Stamp.REPLY_DELTA, " old, late", 120))
    assert sink.deltas == [] and session.trace(0).speculative_retracts == 1
    session.deliver(Record(RecordKind.COMMIT, 0, 1, 0, 400, 0, b""))
    session.deliver(_stamp(Stamp.REPLY_DELTA, " reply", 230))
    assert sink.deltas == ["New", " reply"]
    assert session.trace(0).stamps[Stamp.LLM_START] == 210
