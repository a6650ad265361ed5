"""A pause after unfinished words, through the stage processes: one turn, its trace
counts the held pause, and the reply answers the whole of it (asr/turn_end.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.asr.clipdata import pause_after
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.models import load_asr
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline


@pytest.mark.slow
def test_held_pause_is_one_turn_with_the_hold_in_its_trace(clips_dir) -> None:
    # librivox/0870 with a pause after "and Mr. John Dashwood had then leisure to consider":
    # open and long, held whatever its last word. (cards/005 after "four of", the ASR
    # tests' case, reads "4 of class" in the pipeline on an AVX-512 Xeon: not held.)
    audio, _ = pause_after(
        clips_dir, "librivox/0870.wav", load_asr(ASRConfig(model="tiny.en")).whisper["tiny.en"],
        "consider",
    )  # fmt: skip
    speech = Clip((audio * 32767).astype(np.int16), 16_000, 1)

    async def scenario():
        async with Pipeline(PipelineConfig()) as pipeline:
            return await pipeline.run_clip(speech.with_silence(1.5))

    result = asyncio.run(scenario())
    assert not result.errors, result.errors
    assert len(result.traces) == 1, [t.transcript for t in result.traces]
    row = result.traces[0].to_dict()
    assert "consider" in row["transcript"].lower() and "for them" in row["transcript"].lower()
    assert row["end_holds"] == 1, row
    # The held pause was not the last: the turn ended at the usual 300 ms.
    assert row["endpoint_ms"] < ASRConfig().turn_fallback_ms, row
    assert row["reply_text"] and len(result.audio) > 0
