"""Decode from static buffers / CUDA graphs: the static-buffer code is checked on the CPU
(run eagerly), the captured graphs on a GPU (marked `gpu`, skipped without CUDA)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.cuda_graphs import batch_buckets, sample_on_device
from voxrelay.llm.engine import LLMEngine

QUESTIONS = (
    "What is the capital of France?",
    "Name three colours of the rainbow, please.",
    "Why is the sky blue?",
    "Tell me a long story.",
    "What is two plus two?",
)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def generate_all(engine: LLMEngine, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """Greedy tokens of all prompts, submitted together (one decode batch)."""
    for index, prompt in enumerate(prompts):
        engine.add_request(100 + index, prompt, max_new_tokens=tokens)
    out: list[list[int]] = [[] for _ in prompts]
    while engine.has_unfinished():
        for output in engine.step():
            out[output.request_id - 100].append(output.token_id)
    return out


def test_batch_buckets() -> None:
    assert batch_buckets(1) == [1]
    assert batch_buckets(8) == [1, 2, 4, 8] and batch_buckets(5) == [1, 2, 4, 8]


def test_static_buffer_decode_equals_the_ordinary_path(engine: LLMEngine) -> None:
    prompts = [engine.dialogue_prompt_ids([], question) for question in QUESTIONS[:3]]
    expected = [generate_all(engine, [prompt], 8)[0] for prompt in prompts]
    config = engine.config
    engine.runner.enable_cuda_graphs(config.max_context_tokens, 4, capture=False)
    try:
        assert generate_all(engine, prompts[:1], 8) == expected[:1]  # bucket 1
        assert generate_all(engine, prompts, 8) == expected  # 3 sequences in bucket 4
    finally:
        engine.runner.graphs = None


def test_static_buffer_decode_with_an_open_prompt_in_the_batch(engine: LLMEngine) -> None:
    prompt = engine.dialogue_prompt_ids([], QUESTIONS[1])
    other = engine.dialogue_prompt_ids([], QUESTIONS[0])
    expected = generate_all(engine, [prompt], 8)[0]
    engine.runner.enable_cuda_graphs(engine.config.max_context_tokens, 4, capture=False)
    try:
        engine.add_request(7, prompt[:20], max_new_tokens=8, prompt_complete=False)
        engine.add_request(8, other, max_new_tokens=8)
        engine.step()  # prefill of both
        engine.append_tokens(7, prompt[20:21])  # one new token: it rides in a decode batch
        outputs = engine.step()
        assert [output.request_id for output in outputs] == [8]  # nothing sampled for 7
        engine.append_tokens(7, prompt[21:])
        engine.start_decode(7)
        tokens = []
        while engine.has_unfinished():
            tokens += [output.token_id for output in engine.step() if output.request_id == 7]
        assert tokens == expected
    finally:
        engine.runner.graphs = None


def test_sampling_on_device() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 0.0]])
    generator = torch.Generator().manual_seed(0)
    assert sample_on_device(logits, 0.0, 0, generator).tolist() == [1, 0]
    assert sample_on_device(logits, 1.0, 1, generator).tolist() == [1, 0]  # top-1 = greedy
    draws = torch.stack([sample_on_device(logits, 1.0, 0, generator) for _ in range(400)])
    share = (draws[:, 0] == 1).float().mean().item()  # softmax gives 0.976 to token 1
    assert 0.93 < share <= 1.0 and (draws[:, 0] != 1).any()


def test_cuda_graphs_need_cuda(model_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match="cuda_graphs=True"):
        LLMEngine(LLMConfig(model_path, cuda_graphs=True, kv_cache_tokens=2048))


def _cuda_engine(model_path: Path, graphs: bool, dtype: str = "float32") -> LLMEngine:
    return LLMEngine(
        LLMConfig(model_path, device="cuda", dtype=dtype, cuda_graphs=graphs, kv_cache_tokens=8192)
    )


@pytest.mark.gpu
@needs_cuda
def test_graph_decode_equals_eager_decode(model_path: Path) -> None:
    graph, eager = _cuda_engine(model_path, True), _cuda_engine(model_path, False)
    assert graph.runner.graphs is not None and eager.runner.graphs is None
    prompts = [graph.dialogue_prompt_ids([], question) for question in QUESTIONS]
    for count in (1, 2, 3, 5):  # buckets 1, 2, 4 and 8
        assert generate_all(graph, prompts[:count], 24) == generate_all(eager, prompts[:count], 24)


@pytest.mark.gpu
@needs_cuda
def test_graph_decode_speed(model_path: Path) -> None:
    rates = {}
    for graphs in (False, True):
        engine = _cuda_engine(model_path, graphs, dtype="bfloat16")
        prompt = engine.dialogue_prompt_ids([], "Tell me a long story about a dragon.")
        generate_all(engine, [prompt], 8)  # warm-up
        engine.add_request(1, prompt, max_new_tokens=128)
        stamps = []
        while engine.has_unfinished():
            stamps += [time.perf_counter() for _ in engine.step()]
        rates["graph" if graphs else "eager"] = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    print(f"\ndecode tok/s: eager {rates['eager']:.0f}, CUDA graphs {rates['graph']:.0f}")
    assert rates["graph"] > rates["eager"]
