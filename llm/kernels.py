"""The native engine's C kernels for small CPU forwards (llm/csrc/, built by `pip install`).

- `matmul_blocks`: x @ W.T with W in the GGUF file's own Q4_1 / Q8_0 blocks
  (`llm.weights.BlockWeight`), for decode steps and prompt tails;
- `paged_attention`: causal attention reading K/V straight from the paged cache;
- `rms_norm`: RMSNorm of a few float32 rows in one call instead of ~7 torch ops.

`available()` says whether they are built and this CPU runs them (x86-64 with AVX2, FMA,
F16C). They run on torch's OpenMP pool: the module is imported after torch, so both use
the one libgomp already loaded, and `torch.set_num_threads` sets their threads too.
"""

from __future__ import annotations

import torch
from gguf.constants import GGMLQuantizationType

try:
    from voxrelay.llm import _kernels
except ImportError:  # not built (no C compiler at install time): torch ops instead
    _kernels = None

# The kernel for each GGUF block kind the matmul reads.
_MATMULS = (
    {}
    if _kernels is None
    else {
        GGMLQuantizationType.Q4_1: _kernels.linear_q4_1,
        GGMLQuantizationType.Q8_0: _kernels.linear_q8_0,
    }
)
BLOCK_KINDS = frozenset((GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0))


def available() -> bool:
    """Whether the kernels are built and this CPU can run them."""
    return _kernels is not None and bool(_kernels.supported())


def matmul_blocks(
    kind: GGMLQuantizationType, x: torch.Tensor, blocks: torch.Tensor, out_features: int
) -> torch.Tensor:
    """x (..., K) float32 @ W.T -> (..., N) float32; `blocks` (N, K / 32 * block bytes)."""
    assert x.dtype == torch.float32 and x.device.type == "cpu"
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # (M, K)
    out = torch.empty(rows.shape[0], out_features)  # (M, N)
    _MATMULS[kind](
        rows.data_ptr(),
        blocks.data_ptr(),
        out.data_ptr(),
        rows.shape[0],
        out_features,
        rows.shape[1],
    )
    return out.view(*x.shape[:-1], out_features)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim of float32 `x`, as `F.rms_norm(x, (D,), weight, eps)`."""
    assert _kernels is not None and x.dtype == weight.dtype == torch.float32
    rows = x.contiguous()
    out = torch.empty_like(rows)
    dim = rows.shape[-1]
    _kernels.rms_norm(
        rows.data_ptr(), weight.data_ptr(), out.data_ptr(), rows.numel() // dim, dim, eps
    )
    return out


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    context_slots: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Causal attention of new tokens over the paged cache, float32, 1/sqrt(Dh) scale.

    q (B, T, H, Dh); k_cache, v_cache (slots, Hkv, Dh) of one layer; context_slots (B, S)
    int64, slot of position j; positions (B, T) int64: a query at position p attends to
    keys 0..p. Returns (B, T, H, Dh).
    """
    assert _kernels is not None and q.dtype == k_cache.dtype == torch.float32
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    batch, new_tokens, heads, head_dim = q.shape
    q = q.contiguous()
    slots = context_slots.contiguous()
    positions = positions.contiguous()
    out = torch.empty_like(q)
    _kernels.attention(
        q.data_ptr(),
        k_cache.data_ptr(),
        v_cache.data_ptr(),
        slots.data_ptr(),
        positions.data_ptr(),
        out.data_ptr(),
        batch,
        new_tokens,
        heads,
        k_cache.shape[1],
        head_dim,
        slots.shape[1],
        head_dim**-0.5,
    )
    return out
