"""The C attention over the paged KV cache (`llm/csrc/attention.c`) and the kernels' checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from voxrelay.llm import kernels
from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine

pytestmark = pytest.mark.skipif(not kernels.available(), reason="needs llm/csrc + AVX2")


def _sdpa(q, k_cache, v_cache, context_slots, positions):  # type: ignore[no-untyped-def]
    """The torch path of llm/model.py: gather the context, mask causally, SDPA."""
    batch, new_tokens, heads, head_dim = q.shape
    width, kv_heads = context_slots.shape[1], k_cache.shape[1]
    shape = (batch, width, kv_heads, head_dim)
    keys = k_cache.index_select(0, context_slots.flatten()).view(shape).transpose(1, 2)
    values = v_cache.index_select(0, context_slots.flatten()).view(shape).transpose(1, 2)
    mask = (torch.arange(width) <= positions[:, :, None]).unsqueeze(1)  # (B, 1, T, S)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True
    )
    return out.transpose(1, 2)  # (B, T, H, Dh)


@pytest.mark.parametrize(("new_tokens", "sharpness"), [(1, 1.0), (3, 1.0), (13, 1.0), (1, 60.0)])
def test_attention_matches_sdpa_over_a_paged_cache(new_tokens: int, sharpness: float) -> None:
    generator = torch.Generator().manual_seed(new_tokens)
    heads, kv_heads, head_dim, slots = 9, 3, 64, 512
    k_cache = torch.randn(slots, kv_heads, head_dim, generator=generator)
    v_cache = torch.randn(slots, kv_heads, head_dim, generator=generator)
    # Two sequences of different lengths over scattered slots; the shorter is padded
    # (its slots beyond its length point anywhere, as the runner's scratch block does).
    lengths = (37, 300)
    width = max(lengths)
    context_slots = torch.stack(
        [torch.randperm(slots, generator=generator)[:width] for _ in lengths]
    )
    positions = torch.tensor([[n - new_tokens + t for t in range(new_tokens)] for n in lengths])
    # sharpness 60: scores far apart, the softmax all but one-hot (exp's range reduction)
    q = sharpness * torch.randn(2, new_tokens, heads, head_dim, generator=generator)
    got = kernels.paged_attention(q, k_cache, v_cache, context_slots, positions)
    want = _sdpa(q, k_cache, v_cache, context_slots, positions)
    assert got.shape == want.shape == (2, new_tokens, heads, head_dim)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("shape", [(1, 1, 576), (2, 7, 576), (3, 20)])
def test_rms_norm_matches_torch(shape: tuple[int, ...]) -> None:
    generator = torch.Generator().manual_seed(len(shape))
    x = 3 * torch.randn(*shape, generator=generator)
    weight = torch.randn(shape[-1], generator=generator)
    got = kernels.rms_norm(x, weight, 1e-5)
    assert got.shape == x.shape
    torch.testing.assert_close(got, F.rms_norm(x, (shape[-1],), weight, 1e-5))


def test_kernels_reject_shapes_they_cannot_run() -> None:
    from voxrelay.llm import _kernels

    x = torch.zeros(1, 40)
    with pytest.raises(ValueError, match="multiple of 32"):
        _kernels.linear_q4_1(x.data_ptr(), x.data_ptr(), x.data_ptr(), 1, 1, 40)
    with pytest.raises(TypeError, match="6 arguments"):
        _kernels.linear_q8_0(x.data_ptr())
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        _kernels.linear_q8_0(x.data_ptr(), x.data_ptr(), x.data_ptr(), 0, 1, 32)
    ptrs = [x.data_ptr()] * 6
    with pytest.raises(ValueError, match="multiple of 8"):  # head dim 12
        _kernels.attention(*ptrs, 1, 1, 9, 3, 12, 4, 0.3)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        _kernels.attention(*ptrs, 1, 1, 9, 2, 64, 4, 0.125)


def test_engine_replies_are_the_same_with_the_kernels_or_torch(model_path: Path) -> None:
    def greedy(cpu_kernels: bool) -> list[list[int]]:
        config = LLMConfig(model_path, device="cpu", num_threads=2, decode_dtype="same",
                           kv_cache_tokens=1024, max_context_tokens=512)  # fmt: skip
        engine = LLMEngine(config)
        assert engine.runner.model.cpu_kernels  # on by default on this CPU
        engine.runner.model.cpu_kernels = cpu_kernels
        texts = ("Why is the sky blue?", "Give me two tips for sleeping well.")
        replies: dict[int, list[int]] = {0: [], 1: []}
        for index, text in enumerate(texts):  # two requests decoding in one batch
            engine.add_request(index, engine.dialogue_prompt_ids([], text), max_new_tokens=24)
        while engine.has_unfinished():
            for output in engine.step():
                replies[output.request_id].append(output.token_id)
        return [replies[0], replies[1]]

    assert greedy(True) == greedy(False)
