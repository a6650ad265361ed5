"""Matmul weight formats of the native engine and the one `linear` that runs them all.

A forward picks one `WeightSet` by its number of new tokens (B * T): on a CPU the best
format depends on it (docs/llm.md, "Weight formats"):

- decode steps (a few tokens) are bound by memory bandwidth: bfloat16 halves the bytes
  read per step;
- on a CPU with AVX2 the default reads the GGUF file's own quantized blocks there
  (`BlockWeight`, Q4_1 / Q8_0: 0.6-1.1 bytes per weight) with the kernels of
  `llm/csrc/blocks.c` (llm/kernels.py), built by `pip install`;
- anything bigger is bound by compute, and AVX2 has no native bfloat16, so it runs in
  float32. There, oneDNN's prepacked ("reordered") weights beat the plain float32 GEMM
  by 1.7x at 8-16 tokens (a prompt tail) and 1.25x at ~340 (a cold prompt), because the
  plain GEMM repacks the whole weight on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gguf.constants import GGMLQuantizationType

from voxrelay.llm.gguf_loader import GGUFFile
from voxrelay.llm.kernels import BLOCK_KINDS, matmul_blocks

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
    kind: GGMLQuantizationType  # Q4_1 or Q8_0

    @classmethod
    def from_file(cls, gguf_file: GGUFFile, names: list[str]) -> BlockWeight:
        """The tensors `names` (same kind and width) stacked by rows, as one weight."""
        infos = [gguf_file.tensors[name] for name in names]
        kinds = {info.quant_type for info in infos}
        widths = {info.shape[-1] for info in infos}
        matrices = all(len(info.shape) == 2 for info in infos)
        if len(kinds) != 1 or len(widths) != 1 or not matrices or kinds - BLOCK_KINDS:
            raise ValueError(
                f"no block kernel for {names}: types {sorted(k.name for k in kinds)}, "
                f"widths {sorted(widths)} (Q4_1 or Q8_0 matrices of one width are supported)"
            )
        rows = [
            torch.from_numpy(gguf_file.raw(name)).view(info.shape[0], -1)
            for name, info in zip(names, infos, strict=True)
        ]
        blocks = torch.cat(rows)  # a copy: the file buffer can be freed
        return cls(blocks, blocks.shape[0], next(iter(widths)), next(iter(kinds)))


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
        return matmul_blocks(weight.kind, x, weight.blocks, weight.out_features)
    if weight.dtype == x.dtype:
        return F.linear(x, weight)
    return F.linear(x.to(weight.dtype), weight).to(x.dtype)


def convert(weight: torch.Tensor, dtype: torch.dtype) -> Weight:
    """`weight` in the format that serves `dtype`."""
    return weight.to(dtype)
