"""The layers of a CTranslate2 Whisper `model.bin` in PyTorch: the file's variables, and
the linear maps and norms the native text decoder (asr/textdecoder.py) and the bfloat16
encoder (asr/encoder.py) build from them.

Weights come in float16 and are kept in int8 with one scale per output row where memory
bandwidth is the bottleneck (the decoder's steps and its vocabulary projection), in
float32 or bfloat16 where the work is compute-bound (the encoder frames' cross-attention
keys and values). Each kernel was chosen per shape by measurement (docs/asr.md, "Native
text decoder").
"""

from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

# CTranslate2's variable types (ctranslate2/types.h) that a Whisper model.bin uses.
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ct2_model(path: Path) -> dict[str, np.ndarray]:
    """The variables of a CTranslate2 `model.bin` (format version 6), aliases resolved."""
    data = path.read_bytes()
    offset = 0

    def take(fmt: str) -> int:
        nonlocal offset
        (value,) = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return int(value)

    def text() -> str:
        nonlocal offset
        size = take("<H")  # includes the trailing NUL
        value = data[offset : offset + size - 1].decode()
        offset += size
        return value

    version = take("<I")
    if version != 6:
        raise ValueError(f"{path}: CTranslate2 model format {version}, this reader knows 6")
    text()  # spec name
    take("<I")  # spec revision
    variables: dict[str, np.ndarray] = {}
    for _ in range(take("<I")):
        name = text()
        shape = [take("<I") for _ in range(take("<B"))]
        dtype = np.dtype(_CT2_DTYPES[take("<B")])
        size = take("<I")
        variables[name] = np.frombuffer(
            data, dtype, count=size // dtype.itemsize, offset=offset
        ).reshape(shape)
        offset += size
    for _ in range(take("<I")):
        alias, target = text(), text()
        variables[alias] = variables[target]
    assert offset == len(data), (offset, len(data))
    return variables


# Below this many rows (single-token steps) a layer uses the weight-only int8 kernel,
# whose cost grows with the rows; from it on (checks of a guess) fbgemm's int8 GEMM.
_GEMM_ROWS = 2


def _int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float32 -> int8 (N, K) and one float32 scale per output row (N,)."""
    scales = (weight.abs().amax(1) / 127).clamp(min=1e-8)
    return (weight / scales[:, None]).round().clamp(-127, 127).to(torch.int8), scales


def _fbgemm_pack(rows: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> Any:
    with warnings.catch_warnings():
        # torch marks quantized tensors deprecated; torch is pinned (pyproject.toml).
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch._make_per_channel_quantized_tensor(
            rows, scales.double(), torch.zeros(len(scales), dtype=torch.long), 0
        )
    return torch.ops.quantized.linear_prepack(quantized, bias)


def _fbgemm(x: torch.Tensor, packed: Any) -> torch.Tensor:
    # reduce_range: 7-bit activations, so AVX2's u8 x s8 pair sums cannot saturate.
    return torch.ops.quantized.linear_dynamic(x, packed, True)


@dataclass(frozen=True, slots=True)
class Int8Linear:
    """A decoder layer's linear map, weights int8 with one scale per output row. One row
    (a step): bfloat16 activations (`_weight_int8pack_mm`); more (a checked guess):
    activations quantized per call (fbgemm), whose cost hardly grows with the rows.
    Memory bandwidth is what this box lacks (float32 weights: 472 us per 8-row GEMM,
    int8: ~200 us)."""

    rows: torch.Tensor  # (N, K) int8
    scales: torch.Tensor  # (N,) bfloat16
    bias: torch.Tensor  # (N,) float32
    packed: Any  # the same weights and bias packed for fbgemm (a LinearPackedParams)

    @classmethod
    def from_ct2(cls, weight: np.ndarray, bias: np.ndarray) -> Int8Linear:
        rows, scales = _int8_rows(torch.from_numpy(weight.astype(np.float32)))
        bias_t = torch.from_numpy(bias.astype(np.float32))
        return cls(rows, scales.to(torch.bfloat16), bias_t, _fbgemm_pack(rows, scales, bias_t))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] >= _GEMM_ROWS:
            return _fbgemm(x, self.packed)
        out = torch._weight_int8pack_mm(x.to(torch.bfloat16), self.rows, self.scales)
        return out.float() + self.bias


@dataclass(frozen=True, slots=True)
class DenseLinear:
    """Linear map for the cross-attention keys and values of the encoder frames (hundreds
    of rows, compute-bound; int8 there cost accuracy: docs/asr.md): float32, or bfloat16
    when the encoder's states come in bfloat16 (asr/encoder.py: on AMX, ~3x float32's
    rate). The output is float32 either way."""

    weight: torch.Tensor  # (N, K)
    bias: torch.Tensor  # (N,)
    weight_bf16: torch.Tensor
    bias_bf16: torch.Tensor

    @classmethod
    def from_ct2(cls, weight: np.ndarray, bias: np.ndarray) -> DenseLinear:
        weight_f32, bias_f32 = (torch.from_numpy(v.astype(np.float32)) for v in (weight, bias))
        return cls(weight_f32, bias_f32, weight_f32.to(torch.bfloat16), bias_f32.to(torch.bfloat16))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.bfloat16:
            return F.linear(x, self.weight_bf16, self.bias_bf16).float()
        return F.linear(x, self.weight, self.bias)


@dataclass(frozen=True, slots=True)
class VocabProjection:
    """The vocabulary projection (51,864 x d, no bias) through fbgemm: 20 MB of int8
    weights that stream from memory every step; `_weight_int8pack_mm` was 2-3x slower."""

    packed: Any

    @classmethod
    def from_ct2(cls, weight: np.ndarray) -> VocabProjection:
        return cls(_fbgemm_pack(*_int8_rows(torch.from_numpy(weight.astype(np.float32))), None))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return _fbgemm(x, self.packed)


@dataclass(frozen=True, slots=True)
class LayerNorm:
    """A LayerNorm of a CTranslate2 model (also the encoder's, asr/encoder.py, in bfloat16)."""

    gamma: torch.Tensor
    beta: torch.Tensor

    @classmethod
    def from_ct2(cls, variables: dict[str, np.ndarray], name: str) -> LayerNorm:
        gamma, beta = (variables[f"{name}/{part}"].astype(np.float32) for part in ("gamma", "beta"))
        return cls(torch.from_numpy(gamma), torch.from_numpy(beta))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta)
