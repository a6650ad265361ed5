"""Matmul weight formats of the native engine and the one `linear` that runs them all.

A forward picks one `WeightSet` by its number of new tokens (B * T): on a CPU the best
format depends on it (docs/llm.md, "Weight formats"):

- decode steps (a few tokens) are bound by memory bandwidth: bfloat16 halves the bytes
  read per step;
- on a CPU with AVX2 the default reads the GGUF file's own quantized blocks there
  (`BlockWeight`, Q4_1 / Q8_0: 0.6-1.1 bytes per weight) with the kernels of
  `llm/_ggml.c`, built by `pip install`;
- anything bigger is bound by compute, and AVX2 has no native bfloat16, so it runs in
  float32. There, oneDNN's prepacked ("reordered") weights beat the plain float32 GEMM
  by 1.7x at 8-16 tokens (a prompt tail) and 1.25x at ~340 (a cold prompt), because the
  plain GEMM repacks the whole weight on every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gguf.constants import GGMLQuantizationType

from llm.gguf_loader import GGUFFile

try:  # imported after torch, so both share torch's OpenMP runtime (one thread pool)
    from llm import _ggml
except ImportError:  # not built (no compiler at install time): bfloat16 decode instead
    _ggml = None

# Token count for which oneDNN lays out the packed weights. One layout serves every size:
# a 16-token layout runs a 340-token prefill within ~5% of a 128-token one.
PACK_HINT_TOKENS = 16


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


# The kernel for each GGUF block kind: f(x, blocks, out, M, N, K), addresses and sizes.
BlockKernel = Callable[[int, int, int, int, int, int], None]
_BLOCK_KERNELS: dict[GGMLQuantizationType, BlockKernel] = (
    {}
    if _ggml is None
    else {
        GGMLQuantizationType.Q4_1: _ggml.linear_q4_1,
        GGMLQuantizationType.Q8_0: _ggml.linear_q8_0,
    }
)

BLOCK_KINDS = frozenset((GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0))


def blocks_supported() -> bool:
    """Whether the GGUF block kernels are built and this CPU can run them (AVX2+FMA+F16C)."""
    return _ggml is not None and bool(_ggml.supported())


@dataclass(frozen=True, slots=True)
class BlockWeight:
    """An (N, K) weight kept in the GGUF file's quantized blocks, rows in order.

    The kernel unpacks each block in registers to exactly the dequantizer's values and
    quantizes the activations to int16 per 32-block (error <= 1/65534 of the block's
    largest): ~60x closer to the float32 result than bfloat16, at a third of its bytes.
    """

    blocks: torch.Tensor  # (N, K / 32 * block bytes) uint8
    out_features: int
    in_features: int
    kernel: BlockKernel  # the `llm._ggml` function for this block kind

    @classmethod
    def from_file(cls, gguf_file: GGUFFile, names: list[str]) -> BlockWeight:
        """The tensors `names` (same kind and width) stacked by rows, as one weight."""
        infos = [gguf_file.tensors[name] for name in names]
        kinds = {info.quant_type for info in infos}
        widths = {info.shape[-1] for info in infos}
        matrices = all(len(info.shape) == 2 for info in infos)
        if len(kinds) != 1 or len(widths) != 1 or not matrices or kinds - _BLOCK_KERNELS.keys():
            raise ValueError(
                f"no block kernel for {names}: types {sorted(k.name for k in kinds)}, "
                f"widths {sorted(widths)} (Q4_1 or Q8_0 matrices of one width are supported)"
            )
        rows = [
            torch.from_numpy(gguf_file.raw(name)).view(info.shape[0], -1)
            for name, info in zip(names, infos, strict=True)
        ]
        blocks = torch.cat(rows)  # a copy: the file buffer can be freed
        kernel = _BLOCK_KERNELS[next(iter(kinds))]
        return cls(blocks, blocks.shape[0], next(iter(widths)), kernel)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., K) float32 @ weight.T -> (..., N) float32."""
        assert x.dtype == torch.float32 and x.device.type == "cpu"
        rows = x.reshape(-1, self.in_features).contiguous()  # (M, K)
        out = torch.empty(rows.shape[0], self.out_features)  # (M, N)
        self.kernel(
            rows.data_ptr(),
            self.blocks.data_ptr(),
            out.data_ptr(),
            rows.shape[0],
            self.out_features,
            self.in_features,
        )
        return out.view(*x.shape[:-1], self.out_features)


Weight = torch.Tensor | PackedWeight | BlockWeight


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
    if isinstance(weight, BlockWeight):
        return weight.matmul(x)
    if weight.dtype == x.dtype:
        return F.linear(x, weight)
    return F.linear(x.to(weight.dtype), weight).to(x.dtype)


def convert(weight: torch.Tensor, dtype: torch.dtype) -> Weight:
    """`weight` in the format that serves `dtype`."""
    return weight.to(dtype)
