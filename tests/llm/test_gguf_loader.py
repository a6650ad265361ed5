from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from gguf.quants import dequantize

from voxrelay.llm.gguf_loader import GGUFFile, read_hparams, read_tokenizer_data


def test_hparams(gguf_file: GGUFFile) -> None:
    hp = read_hparams(gguf_file)
    assert (hp.num_layers, hp.dim, hp.ffn_dim) == (30, 576, 1536)
    assert (hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.vocab_size) == (9, 3, 64, 49152)
    assert hp.rope_base == 100000.0
    assert hp.rms_eps == pytest.approx(1e-5)


def test_tokenizer_data(gguf_file: GGUFFile) -> None:
    data = read_tokenizer_data(gguf_file)
    assert len(data.tokens) == 49152 and len(data.token_types) == 49152
    assert data.tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert (data.bos_id, data.eos_id, data.pre) == (1, 2, "smollm")
    assert data.merges[0] == "Ġ t"
    assert "<|im_start|>" in data.chat_template


@pytest.mark.parametrize(
    "name",
    ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"],
)
def test_torch_dequant_matches_gguf_reference(gguf_file: GGUFFile, name: str) -> None:
    info = gguf_file.tensors[name]
    raw = gguf_file.raw(name)
    if info.quant_type.name == "F32":
        expected = raw.view(np.float32).reshape(info.shape)
    else:
        expected = dequantize(raw, info.quant_type).reshape(info.shape)
    np.testing.assert_array_equal(gguf_file.dequantize(name).numpy(), expected)


def test_not_a_gguf_file(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"NOPE" + bytes(64))
    with pytest.raises(ValueError, match="not a GGUF"):
        GGUFFile(bogus)


def test_header_parse_is_fast(model_path: Path) -> None:
    start = time.perf_counter()
    GGUFFile(model_path)
    assert time.perf_counter() - start < 5.0  # ~0.3 s here; generous for a busy machine
