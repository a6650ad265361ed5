"""Whisper's audio encoder in PyTorch bfloat16, for CPUs with AMX (Intel Sapphire Rapids
and later): `ASRConfig.encoder = "bfloat16"`.

The encoder is most of a short utterance's decode, and the end-of-turn decode is on the
path to the first reply audio. CTranslate2's CPU compute types stop at int8/int16/float32,
and its int8 encoder takes ~60 ms at 800 frames on this box's 2 cores. With AMX tiles
oneDNN runs a bfloat16 GEMM at ~3x float32's rate: the same encoder in bfloat16 takes
~40-45 ms once its threads spin briefly (`ASRConfig.openmp_spin`; ~60-70 passive), and
with the cross-attention keys and values in bfloat16 as well a pause decode after an
idle spell takes 35-47% less time (docs/asr.md, "Session 28"). Without AMX, bfloat16 is
emulated and slower than CTranslate2 (`load_asr` warns).

Weights are the float16 ones CTranslate2 loads from the same `model.bin`, cast to
bfloat16; the output, (frames / 2, d), stays bfloat16: the text decoder's one GEMM over
it (every layer's cross-attention keys and values) then runs in bfloat16 too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from voxrelay.asr.ct2_layers import LayerNorm, read_ct2_model

DTYPE = torch.bfloat16


@lru_cache(maxsize=1)
def amx_available() -> bool:
    """Whether the CPU has AMX bfloat16 tiles that PyTorch can use."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    if probe is not None:
        return bool(probe())
    try:
        return "amx_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class _Layer:
    attention_norm: LayerNorm
    qkv: tuple[torch.Tensor, torch.Tensor]  # (3d, d), (3d,)
    attention_out: tuple[torch.Tensor, torch.Tensor]
    ffn_norm: LayerNorm
    ffn_in: tuple[torch.Tensor, torch.Tensor]
    ffn_out: tuple[torch.Tensor, torch.Tensor]


class AudioEncoder:
    """Log-mel (1, 80, frames) float32 -> encoder states (frames / 2, d) bfloat16."""

    def __init__(self, model_dir: Path) -> None:
        variables = read_ct2_model(model_dir / "model.bin")

        def tensor(name: str) -> torch.Tensor:
            return torch.from_numpy(variables[name].astype(np.float32)).to(DTYPE)

        def linear(prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
            return tensor(f"{prefix}/weight"), tensor(f"{prefix}/bias")

        def norm(prefix: str) -> LayerNorm:
            return LayerNorm(tensor(f"{prefix}/gamma"), tensor(f"{prefix}/beta"))

        self._conv1 = linear("encoder/conv1")
        self._conv2 = linear("encoder/conv2")
        self._positions = tensor("encoder/position_encodings/encodings")  # (1500, d)
        self._heads = int(variables["encoder/num_heads"])
        self._layers = []
        index = 0
        while f"encoder/layer_{index}/ffn/linear_0/weight" in variables:
            prefix = f"encoder/layer_{index}"
            self._layers.append(
                _Layer(
                    norm(f"{prefix}/self_attention/layer_norm"),
                    linear(f"{prefix}/self_attention/linear_0"),
                    linear(f"{prefix}/self_attention/linear_1"),
                    norm(f"{prefix}/ffn/layer_norm"),
                    linear(f"{prefix}/ffn/linear_0"),
                    linear(f"{prefix}/ffn/linear_1"),
                )
            )
            index += 1
        self._final_norm = norm("encoder/layer_norm")

    @torch.inference_mode()
    def __call__(self, mel: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(mel).to(DTYPE)  # (1, 80, frames)
        x = F.gelu(F.conv1d(x, *self._conv1, padding=1))
        x = F.gelu(F.conv1d(x, *self._conv2, stride=2, padding=1))  # (1, d, frames / 2)
        # (T, d), row-major: elementwise ops keep their input's strides, so a transposed
        # view here would make every later GEMM read a transposed operand.
        x = x[0].transpose(0, 1).contiguous()
        x = x + self._positions[: x.shape[0]]
        count, width = x.shape
        for layer in self._layers:
            qkv = F.linear(layer.attention_norm(x), *layer.qkv)  # (T, 3d)
            # (1, H, T, D) each: with a batch dimension PyTorch takes its flash kernel
            # (0.7 ms here), without it the reference path (~5 ms).
            q, k, v = qkv.view(1, count, 3, self._heads, width // self._heads).unbind(2)
            attended = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            )  # (1, H, T, D)
            x = x + F.linear(
                attended[0].transpose(0, 1).reshape(count, width), *layer.attention_out
            )
            x = x + F.linear(F.gelu(F.linear(layer.ffn_norm(x), *layer.ffn_in)), *layer.ffn_out)
        return self._final_norm(x)


@lru_cache(maxsize=4)
def load_audio_encoder(model_dir: str) -> AudioEncoder:
    """One encoder per model directory and process (its weights are ~40 MB for base)."""
    return AudioEncoder(Path(model_dir))
