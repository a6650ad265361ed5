"""Speculative replies: started at the ASR's SpeculativeEnd, heard only once committed."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pipeline.audio_io import Clip, read_clip
from pipeline.commit_gate import CommitGate
from pipeline.config import PipelineConfig
from pipeline.run import Pipeline
from tests.asr.clipdata import voiced_span


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
        config = PipelineConfig(asr={"end_silence_ms": 800})
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
