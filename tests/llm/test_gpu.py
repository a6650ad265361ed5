from __future__ import annotations

from pathlib import Path

import pytest
import torch

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_float32_matches_cpu(model_path: Path) -> None:
    def run(device: str) -> list[int]:
        config = LLMConfig(
            model_path, device=device, dtype="float32", max_new_tokens=16, kv_cache_tokens=2048
        )
        engine = LLMEngine(config)
        engine.add_request(0, engine.dialogue_prompt_ids([], "Why is the sky blue?"))
        tokens: list[int] = []
        while engine.has_unfinished():
            tokens.extend(output.token_id for output in engine.step())
        return tokens

    assert run("cuda") == run("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_auto_picks_cuda_in_bfloat16(model_path: Path) -> None:
    engine = LLMEngine(LLMConfig(model_path, kv_cache_tokens=2048))
    assert engine.state.device.type == "cuda" and engine.state.dtype == torch.bfloat16
