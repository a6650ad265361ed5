"""The naive yardstick of `make bench` (`--mode naive`): the same models on their stock
runtimes (faster-whisper transcribe, HF transformers generate, Piper), one after another."""

from __future__ import annotations

import pytest

from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.naive import NaivePipeline

pytestmark = pytest.mark.slow


def test_the_stock_chain_answers_after_the_same_endpoint_one_stage_at_a_time(clips_dir) -> None:
    pipeline = NaivePipeline()
    clip = read_clip(clips_dir / "goforward.raw")
    first = pipeline.run_clip(clip)  # at a microphone's pace: the endpoint wait is real
    assert not first.errors and len(first.traces) == 1
    row = first.traces[0].to_dict()
    assert row["transcript"].lower().startswith("go forward") and row["reply_text"]
    assert row["mode"] == "naive" and len(first.audio) > 0
    assert first.sample_rate == 22_050
    # No overlap: the LLM starts from the final transcript, the TTS from the whole reply.
    assert row["speech_end_ns"] < row["asr_final_ns"] <= row["llm_start_ns"]
    assert row["llm_start_ns"] < row["llm_done_ns"] <= row["first_audio_out_ns"]
    # The same end-of-turn rule as the pipeline: at least end_silence_ms of silence.
    assert row["endpoint_ms"] >= pipeline.asr_config.end_silence_ms
    # The reply's audio is Piper's whole synthesis of the reply text (~60-90 ms a word).
    words = len(row["reply_text"].split())
    assert 0.05 * words < len(first.audio) / 2 / first.sample_rate < 1.0 * words
    # A session is one run_clip: the next one starts with an empty history.
    second = pipeline.run_clip(clip, realtime=False).traces[0].to_dict()
    assert second["prefill_tokens"] == row["prefill_tokens"]
