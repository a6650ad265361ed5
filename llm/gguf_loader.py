"""Read a llama-architecture GGUF file: hyperparameters, tokenizer data and weights.

`gguf.GGUFReader` builds a numpy view per metadata element, which takes ~6 s on the
~100k vocabulary and merge strings of SmolLM2, and `gguf.quants.dequantize` (numpy) takes
~3.7 s for the weights. So the header is parsed here with `struct`, and the two formats
this model uses (Q4_1, Q8_0) are dequantized with vectorised torch ops (multi-threaded);
any other type goes through `gguf.quants.dequantize`, which tests use as the reference.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format of a scalar (strings and arrays handled apart).
_SCALAR_FORMATS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (slowest dim first), i.e. GGUF dims reversed
    quant_type: GGMLQuantizationType
    data_offset: int  # absolute byte offset in the file
    nbytes: int


@dataclass(frozen=True, slots=True)
class LlamaHParams:
    num_layers: int
    dim: int
    ffn_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rope_base: float
    rms_eps: float
    max_positions: int


@dataclass(frozen=True, slots=True)
class TokenizerData:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int
    eos_id: int
    pre: str
    chat_template: str


class GGUFFile:
    """An mmap-backed GGUF file: `metadata`, `tensors`, and raw tensor bytes on demand."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"GGUF model not found at {path}; run `voxrelay models fetch`")
        # A writable buffer (not an mmap) so torch.frombuffer can view it without a copy;
        # reading ~100 MB from the page cache costs tens of milliseconds.
        self._map = bytearray(path.stat().st_size)
        with path.open("rb") as handle:
            handle.readinto(self._map)
        self._pos = 0
        if self._read(4) != GGUF_MAGIC:
            raise ValueError(f"{path} is not a GGUF file (bad magic)")
        version, tensor_count, kv_count = self._unpack("<IQQ")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is too old, need >= 2")
        self.metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = self._read_string()
            (value_type,) = self._unpack("<I")
            self.metadata[key] = self._read_value(value_type)
        infos = [self._read_tensor_info() for _ in range(tensor_count)]
        alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        data_start = -(-self._pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, quant_type, offset in infos:
            block_size, type_size = GGML_QUANT_SIZES[quant_type]
            nbytes = int(np.prod(shape)) // block_size * type_size
            self.tensors[name] = TensorInfo(name, shape, quant_type, data_start + offset, nbytes)

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a uint8 view of the file buffer, no copy."""
        info = self.tensors[name]
        return np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.data_offset)

    def dequantize(self, name: str) -> torch.Tensor:
        """The tensor as a new float32 tensor in numpy order, e.g. (out_features, in_features)."""
        info = self.tensors[name]
        raw = torch.frombuffer(
            self._map, dtype=torch.uint8, count=info.nbytes, offset=info.data_offset
        )
        decode = _TORCH_DEQUANT.get(info.quant_type)
        if decode is not None:
            flat = decode(raw)
        else:
            flat = torch.from_numpy(dequantize(self.raw(name), info.quant_type).reshape(-1))
        return flat.reshape(info.shape)

    def _read(self, count: int) -> bytes:
        chunk = self._map[self._pos : self._pos + count]
        self._pos += count
        return chunk

    def _unpack(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return values

    def _read_string(self) -> str:
        (length,) = self._unpack("<Q")
        return self._read(length).decode("utf-8", errors="replace")

    def _read_strings(self, count: int) -> list[str]:
        # Tight loop with locals: the vocabulary and merges are ~100k strings.
        data, pos, strings = self._map, self._pos, []
        unpack_length = struct.Struct("<Q").unpack_from
        for _ in range(count):
            (length,) = unpack_length(data, pos)
            pos += 8
            strings.append(data[pos : pos + length].decode("utf-8", errors="replace"))
            pos += length
        self._pos = pos
        return strings

    def _read_value(self, value_type: int) -> Any:
        if value_type == _STRING:
            return self._read_string()
        if value_type == _ARRAY:
            item_type, count = self._unpack("<IQ")
            if item_type in _SCALAR_FORMATS:
                fmt = _SCALAR_FORMATS[item_type]
                values = struct.unpack_from(f"<{count}{fmt[1]}", self._map, self._pos)
                self._pos += struct.calcsize(fmt) * count
                return list(values)
            if item_type == _STRING:
                return self._read_strings(count)
            return [self._read_value(item_type) for _ in range(count)]
        (value,) = self._unpack(_SCALAR_FORMATS[value_type])
        return value

    def _read_tensor_info(self) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
        name = self._read_string()
        (num_dims,) = self._unpack("<I")
        dims = self._unpack(f"<{num_dims}Q")
        quant_type, offset = self._unpack("<IQ")
        return name, tuple(reversed(dims)), GGMLQuantizationType(quant_type), offset


def read_hparams(gguf_file: GGUFFile) -> LlamaHParams:
    """Hyperparameters of a llama-architecture model; ValueError for any other arch."""
    meta = gguf_file.metadata
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"only llama-architecture GGUF models are supported, got {arch!r}")
    dim = int(meta["llama.embedding_length"])
    num_heads = int(meta["llama.attention.head_count"])
    return LlamaHParams(
        num_layers=int(meta["llama.block_count"]),
        dim=dim,
        ffn_dim=int(meta["llama.feed_forward_length"]),
        num_heads=num_heads,
        num_kv_heads=int(meta.get("llama.attention.head_count_kv", num_heads)),
        head_dim=int(meta.get("llama.rope.dimension_count", dim // num_heads)),
        vocab_size=gguf_file.tensors["token_embd.weight"].shape[0],
        rope_base=float(meta.get("llama.rope.freq_base", 10000.0)),
        rms_eps=float(meta["llama.attention.layer_norm_rms_epsilon"]),
        max_positions=int(meta["llama.context_length"]),
    )


def read_tokenizer_data(gguf_file: GGUFFile) -> TokenizerData:
    """Vocabulary, merges and chat template of a byte-level BPE ("gpt2") tokenizer."""
    meta = gguf_file.metadata
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"only byte-level BPE ('gpt2') tokenizers are supported, got {model!r}")
    return TokenizerData(
        tokens=meta["tokenizer.ggml.tokens"],
        token_types=meta["tokenizer.ggml.token_type"],
        merges=meta["tokenizer.ggml.merges"],
        bos_id=int(meta["tokenizer.ggml.bos_token_id"]),
        eos_id=int(meta["tokenizer.ggml.eos_token_id"]),
        pre=str(meta.get("tokenizer.ggml.pre", "default")),
        chat_template=str(meta["tokenizer.chat_template"]),
    )


def _dequant_f32(raw: torch.Tensor) -> torch.Tensor:
    return raw.view(torch.float32).clone()


def _dequant_f16(raw: torch.Tensor) -> torch.Tensor:
    return raw.view(torch.float16).float()


def _dequant_q8_0(raw: torch.Tensor) -> torch.Tensor:
    # Block of 34 bytes: f16 scale d, then 32 int8 quants; x = d * q.
    blocks = raw.view(-1, 34)
    scale = blocks[:, :2].contiguous().view(torch.float16).float()  # (N, 1)
    quants = blocks[:, 2:].contiguous().view(torch.int8).float()  # (N, 32)
    return (quants * scale).reshape(-1)


def _dequant_q4_1(raw: torch.Tensor) -> torch.Tensor:
    # Block of 20 bytes: f16 scale d, f16 min m, 16 bytes of nibbles; x = d * q + m.
    # Low nibbles hold elements 0..15 of the block, high nibbles elements 16..31.
    blocks = raw.view(-1, 20)
    scale_min = blocks[:, :4].contiguous().view(torch.float16).float()  # (N, 2)
    packed = blocks[:, 4:]  # (N, 16)
    quants = torch.cat((packed & 0x0F, packed >> 4), dim=1).float()  # (N, 32)
    return (quants * scale_min[:, :1] + scale_min[:, 1:]).reshape(-1)


_TORCH_DEQUANT = {
    GGMLQuantizationType.F32: _dequant_f32,
    GGMLQuantizationType.F16: _dequant_f16,
    GGMLQuantizationType.Q8_0: _dequant_q8_0,
    GGMLQuantizationType.Q4_1: _dequant_q4_1,
}
