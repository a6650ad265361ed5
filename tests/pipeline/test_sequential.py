"""The sequential yardstick of `make bench` (`--mode sequential`): one stage after the
other in one process, with the streaming pipeline's dialogue rules and trace rows."""

from __future__ import annotations

import pytest

from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.sequential import SequentialPipeline

pytestmark = pytest.mark.slow


def test_each_stage_waits_for_the_one_before_and_each_session_starts_afresh(clips_dir) -> None:
    pipeline = SequentialPipeline(llm={"max_new_tokens": 24})
    clip = read_clip(clips_dir / "goforward.raw")
    first = pipeline.run_clip(clip, realtime=False)
    assert not first.errors and len(first.traces) == 1
    row = first.traces[0].to_dict()
    assert row["transcript"].lower().startswith("go forward") and row["reply_text"]
    assert row["mode"] == "sequential" and len(first.audio) > 0
    # No overlap: the LLM starts from the final transcript, the TTS from the whole reply.
    assert row["asr_final_ns"] <= row["llm_first_token_ns"] <= row["llm_done_ns"]
    assert row["llm_done_ns"] <= row["tts_first_audio_ns"] <= row["first_audio_out_ns"]
    assert row["prefill_early_tokens"] == 0 and row["ttfa_ms"] > 0
    # A session is one run_clip: the next one starts with an empty history.
    second = pipeline.run_clip(clip, realtime=False).traces[0].to_dict()
    assert second["prefill_tokens"] == row["prefill_tokens"]
