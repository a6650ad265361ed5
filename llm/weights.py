"""Matmul weight formats of the native engine and the one `linear` that runs them all.

A forward picks one `WeightSet` by its number of new tokens (B * T): on a CPU the best
format depends on it (docs/llm.md, "Weight formats"):

- decode steps (a few tokens) are bound by memory bandwidth: bfloat16 (or opt-in int8)
  halves (quarters) the bytes read per step;
- anything bigger is bound by compute, and AVX2 has no native bfloat16, so it runs in
  float32. There, oneDNN's prepacked ("reordered") weights beat the plain float32 GEMM
  by 1.7x at 8-16 tokens (a prompt tail) and 1.25x at ~340 (a cold prompt), because the
  plain GEMM repacks the whole weight on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Token count for which oneDNN lays out the packed weights. One layout serves every size:
# a 16-token layout runs a 340-token prefill within ~5% of a 128-token one.
PACK_HINT_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Int8Weight:
    """Weight-only int8, one scale per output row; used with bfloat16 activations.

    A quarter of float32's bytes; `_weight_int8pack_mm` beats the bfloat16 GEMM at every
    M up to ~32 on this AVX2 CPU (docs/llm.md).
    """

    values: torch.Tensor  # (N, K) int8
    scales: torch.Tensor  # (N,) bfloat16

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> Int8Weight:
        # Round against the bfloat16 scale the kernel will use, not the exact one.
        scales = (weight.float().abs().amax(dim=1).clamp(min=1e-12) / 127).to(torch.bfloat16)
        steps = weight.float() / scales.float()[:, None]  # (N, K)
        return cls(steps.round().clamp(-127, 127).to(torch.int8), scales)


@dataclass(frozen=True, slots=True)
class PackedWeight:
    """A float32 weight in oneDNN's blocked layout: same values, same results (to float32
    rounding), no per-call repacking."""

    packed: torch.Tensor  # opaque oneDNN layout of an (N, K) float32 weight

    @classmethod
    def pack(cls, weight: torch.Tensor) -> PackedWeight:
        assert weight.dtype == torch.float32 and weight.device.type == "cpu"
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_HINT_TOKENS)
        return cls(packed)


Weight = torch.Tensor | Int8Weight | PackedWeight


def can_pack(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether float32 weights can be prepacked here (a CPU build with oneDNN)."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


def linear(x: torch.Tensor, weight: Weight) -> torch.Tensor:
    """x @ weight.T computed in the weight's format, returned in x's dtype."""
    if isinstance(weight, PackedWeight):
        return torch.ops.mkldnn._linear_pointwise(x, weight.packed, None, "none", [], "")
    if isinstance(weight, Int8Weight):
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)  # (M, K): the op takes 2-D
        out = torch._weight_int8pack_mm(rows, weight.values, weight.scales)  # (M, N)
        return out.reshape(*x.shape[:-1], -1).to(x.dtype)
    if weight.dtype == x.dtype:
        return F.linear(x, weight)
    return F.linear(x.to(weight.dtype), weight).to(x.dtype)


def convert(weight: torch.Tensor, dtype: torch.dtype) -> Weight:
    """`weight` in the format that serves `dtype` (int8: weight-only quantized)."""
    if dtype == torch.int8:
        return Int8Weight.quantize(weight)
    return weight.to(dtype)
