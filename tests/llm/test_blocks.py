"""Matmuls on the GGUF file's own quantized blocks (`llm/csrc/blocks.c`, `decode_dtype="gguf"`)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

from voxrelay.llm import kernels
from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine, resolve_decode_weights
from voxrelay.llm.gguf_loader import GGUFFile
from voxrelay.llm.model import BLOCK_DECODE_MAX_TOKENS
from voxrelay.llm.weights import BlockWeight, PackedWeight, linear


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_kernels_are_built_wherever_they_can_run() -> None:
    # `pip install -e .` builds llm/csrc; an install that silently skipped it would
    # leave the default engine on the slower bfloat16 path.
    can_run = platform.machine() == "x86_64" and {"avx2", "fma", "f16c"} <= _cpu_flags()
    assert kernels.available() == can_run


needs_kernels = pytest.mark.skipif(not kernels.available(), reason="needs llm/csrc + AVX2")


@needs_kernels
@pytest.mark.parametrize(
    ("names", "rows"),
    [
        (["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"], 1),  # Q4_1
        (["blk.3.ffn_down.weight"], 3),  # Q4_1, K = 1536
        (["blk.7.ffn_gate.weight", "blk.7.ffn_up.weight"], 11),  # a prompt tail: 2 tiles + 3
        (["token_embd.weight"], 2),  # Q8_0
    ],
)
def test_block_matmul_matches_the_dequantized_weights(
    gguf_file: GGUFFile, names: list[str], rows: int
) -> None:
    weight = BlockWeight.from_file(gguf_file, names)
    dense = torch.cat([gguf_file.dequantize(name) for name in names])  # (N, K) float32
    assert (weight.out_features, weight.in_features) == tuple(dense.shape)
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(1, rows, dense.shape[1], generator=generator)  # (B, T, K)
    got = linear(x, weight)
    exact = (x.double() @ dense.double().T).float()
    assert got.shape == exact.shape and got.dtype == torch.float32
    # int16 activations per 32-block: ~1e-5 of the output scale; bfloat16 is ~4e-3.
    scale = exact.abs().max().item()
    assert (got - exact).abs().max().item() < 2e-4 * scale
    bf16 = (x.bfloat16() @ dense.bfloat16().T).float()
    assert (got - exact).abs().max() < (bf16 - exact).abs().max() / 10


def test_from_file_names_what_it_cannot_fuse(gguf_file: GGUFFile) -> None:
    with pytest.raises(ValueError, match="no block kernel"):
        BlockWeight.from_file(gguf_file, ["blk.0.attn_norm.weight"])  # F32, 1-D
    with pytest.raises(ValueError, match="no block kernel"):  # Q8_0 beside Q4_1
        BlockWeight.from_file(gguf_file, ["token_embd.weight", "blk.0.attn_q.weight"])


def test_auto_picks_the_blocks_on_this_cpu_and_gguf_is_refused_elsewhere(
    model_path: Path, gguf_file: GGUFFile
) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    auto = LLMConfig(model_path)
    assert resolve_decode_weights(auto, cpu, gguf_file) == (
        "gguf" if kernels.available() else "bfloat16"
    )
    assert resolve_decode_weights(auto, cuda, gguf_file) == "bfloat16"
    with pytest.raises(ValueError, match="needs the CPU engine"):
        resolve_decode_weights(LLMConfig(model_path, decode_dtype="gguf"), cuda, gguf_file)


@needs_kernels
def test_block_engine_tracks_the_float32_reference(model_path: Path) -> None:
    def engine(decode_dtype: str) -> LLMEngine:
        config = LLMConfig(model_path, device="cpu", num_threads=2, decode_dtype=decode_dtype,
                           kv_cache_tokens=1024, max_context_tokens=512)  # fmt: skip
        return LLMEngine(config)

    blocks, reference = engine("auto"), engine("same")
    model = blocks.runner.model
    assert blocks.state.decode_weights == "gguf"
    assert isinstance(model.weights_for(1)[0][0].w_down, BlockWeight)
    assert isinstance(model.weights_for(1)[1], BlockWeight)  # the tied Q8_0 output head
    assert isinstance(model.weights_for(BLOCK_DECODE_MAX_TOKENS)[0][0].wqkv, BlockWeight)
    assert isinstance(model.weights_for(BLOCK_DECODE_MAX_TOKENS + 1)[0][0].wqkv, PackedWeight)
    # Greedy 32 tokens equal to float32's: the blocks hold exactly the weights the float32
    # engine dequantized; only the activations' int16 rounding and the sum order differ.
    for text in ("Name three colours of the rainbow.", "How do bees make honey?"):
        ids = reference.dialogue_prompt_ids([], text)
        replies = []
        for llm in (blocks, reference):
            llm.add_request(1, ids, max_new_tokens=32)
            tokens: list[int] = []
            while llm.has_unfinished():
                tokens += [output.token_id for output in llm.step()]
            replies.append(tokens)
        assert replies[0] == replies[1], text
