"""Prepacked float32 weights (oneDNN layout, `LLMConfig.pack_weights`, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.model import DECODE_MAX_TOKENS, UNPACKED_DECODE_MAX_TOKENS
from voxrelay.llm.weights import PackedWeight, can_pack, linear

pytestmark = pytest.mark.skipif(
    not can_pack(torch.float32, torch.device("cpu")), reason="this torch build has no oneDNN"
)


@pytest.mark.parametrize("rows", [1, 3, 11, 64])
def test_packed_linear_matches_the_plain_matmul(rows: int) -> None:
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(384, 96, generator=generator)
    x = torch.randn(2, rows, 96, generator=generator)  # (B, T, K): 3-D input
    packed = linear(x, PackedWeight.pack(weight))
    assert packed.shape == (2, rows, 384) and packed.dtype == torch.float32
    torch.testing.assert_close(packed, F.linear(x, weight), rtol=1e-5, atol=1e-5)


def _greedy(engine: LLMEngine, text: str) -> list[int]:
    engine.add_request(1, engine.dialogue_prompt_ids([], text), max_new_tokens=16)
    tokens: list[int] = []
    while engine.has_unfinished():
        tokens += [output.token_id for output in engine.step()]
    return tokens


def test_packed_and_plain_engines_agree(model_path: Path) -> None:
    def engine(pack: bool, decode_dtype: str = "bfloat16") -> LLMEngine:
        config = LLMConfig(model_path, device="cpu", num_threads=2, pack_weights=pack,
                           decode_dtype=decode_dtype, kv_cache_tokens=1024,
                           max_context_tokens=512)  # fmt: skip
        return LLMEngine(config)

    packed, plain = engine(True), engine(False)
    model = packed.runner.model
    assert model.packed and isinstance(model.layers[0].wqkv, PackedWeight)
    assert isinstance(model.lm_head, PackedWeight)
    assert not plain.runner.model.packed and isinstance(
        plain.runner.model.layers[0].wqkv, torch.Tensor
    )
    # The bfloat16 decode copy serves fewer forwards once float32 is packed (docs/llm.md).
    assert model.narrow_sets[0].max_tokens == DECODE_MAX_TOKENS
    assert plain.runner.model.narrow_sets[0].max_tokens == UNPACKED_DECODE_MAX_TOKENS
    # float32 end to end, packed or not: the same greedy reply (packing only changes
    # the summation order, ~1e-4 on the logits).
    text = "Name three colours of the rainbow and say which one you like best."
    assert _greedy(engine(True, "same"), text) == _greedy(engine(False, "same"), text)
