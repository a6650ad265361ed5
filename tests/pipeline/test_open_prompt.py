"""The LLM stage computes a session's first prompt through the user's header when the
session opens (SESSION_OPEN, llm/open_prompts.py): at the end of a turn whose words were
never stable before its pause (here: no partials at all), only the words and the reply
header are left to prefill."""

from __future__ import annotations

import asyncio

from voxrelay.llm.backend import REPLY_HEADER
from voxrelay.llm.gguf_loader import GGUFFile, read_tokenizer_data
from voxrelay.llm.tokenizer import ChatTokenizer
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.models import asset_path
from voxrelay.pipeline.run import Pipeline


def test_a_short_first_turn_prefills_only_its_words_at_its_end(clips_dir) -> None:
    clip = read_clip(clips_dir / "cards" / "001.wav")  # 1.1 s: "10 of clubs"

    async def scenario():
        config = PipelineConfig(asr={"partial_interval_ms": 0})
        async with Pipeline(config) as pipeline:
            return await pipeline.run_clip(clip.with_silence(1.0))

    result = asyncio.run(scenario())
    assert not result.errors, result.errors
    row = result.traces[-1].to_dict()
    gguf = GGUFFile(asset_path("smollm2") / "model.gguf")
    tokenizer = ChatTokenizer(read_tokenizer_data(gguf))
    words = row["transcript"].strip().rstrip(".")
    # The words, the reply header, and the token the open prompt held back.
    late = len(tokenizer.encode(words + REPLY_HEADER)) + 1
    assert row["prefill_late_tokens"] <= late, row
    assert row["prefill_early_tokens"] > 16, row  # more than the cache's whole block
