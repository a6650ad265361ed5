"""Weight-only int8 decode weights (`decode_dtype="int8"`, CPU)."""

from __future__ import annotations

from pathlib import Path

import torch

from llm.config import LLMConfig
from llm.engine import LLMEngine
from llm.model import INT8_DECODE_MAX_TOKENS
from llm.weights import Int8Weight, linear


def test_quantize_and_matmul_stay_close_to_float32() -> None:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 64, generator=generator)
    quantized = Int8Weight.quantize(weight)
    restored = quantized.values.float() * quantized.scales.float()[:, None]
    row_max = weight.abs().amax(dim=1, keepdim=True)
    assert ((restored - weight).abs() <= row_max / 127).all()  # within one int8 step
    x = torch.randn(2, 5, 64, generator=generator)  # (B, T, K): 3-D input, 2-D kernel
    exact, approx = x @ weight.T, linear(x, quantized)
    assert approx.shape == exact.shape and approx.dtype == torch.float32
    assert (approx - exact).abs().max() < 0.05 * exact.abs().max()


def test_int8_engine_answers_and_covers_a_prompt_tail(model_path: Path) -> None:
    config = LLMConfig(model_path, device="cpu", num_threads=2, decode_dtype="int8",
                       kv_cache_tokens=2048, max_context_tokens=512)  # fmt: skip
    engine = LLMEngine(config)
    model = engine.runner.model
    assert isinstance(model.weights_for(INT8_DECODE_MAX_TOKENS)[0][0].wqkv, Int8Weight)
    assert model.weights_for(INT8_DECODE_MAX_TOKENS + 1)[0] is model.layers
    engine.add_request(1, engine.dialogue_prompt_ids([], "What is the capital of France?"),
                       max_new_tokens=10)  # fmt: skip
    text = ""
    while engine.has_unfinished():
        text += "".join(output.text for output in engine.step())
    assert "Paris" in text
