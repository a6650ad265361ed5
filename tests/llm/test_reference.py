"""Our forward pass against HF transformers loading the same GGUF file (offline).

transformers dequantizes the GGUF and undoes llama.cpp's Q/K permutation itself, so it is
an independent check of our RoPE layout, GQA, norms and tied output head.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.gguf_loader import GGUFFile, read_hparams
from voxrelay.llm.model import LlamaModel
from voxrelay.llm.tokenizer import ChatTokenizer

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

LOGIT_ATOL = 2e-3  # observed max |diff| ~7e-5 on logits of magnitude ~40
PROMPT = "Explain how a bicycle works, step by step."


@pytest.fixture(scope="module")
def hf_model(model_path: Path) -> torch.nn.Module:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_path.parent, gguf_file=model_path.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="module")
def our_model(gguf_file: GGUFFile) -> LlamaModel:
    return LlamaModel(gguf_file, read_hparams(gguf_file), torch.float32, torch.device("cpu"))


def forward_contiguous(model: LlamaModel, ids: list[int], split: int) -> torch.Tensor:
    """Logits of every position, computed as a prefill of ids[:split] then the rest."""
    hp = model.hparams
    cache_shape = (hp.num_layers, len(ids), hp.num_kv_heads, hp.head_dim)
    k_cache, v_cache = torch.zeros(cache_shape), torch.zeros(cache_shape)
    logits = []
    with torch.inference_mode():
        for start, end in ((0, split), (split, len(ids))):
            positions = torch.arange(start, end)[None]  # (1, T)
            context = torch.arange(end)[None]  # (1, S): slot j holds position j
            mask = (context[0][None, :] <= positions[0][:, None])[None, None]  # (1, 1, T, S)
            hidden = model.hidden(
                torch.tensor([ids[start:end]]),
                positions,
                positions[0],
                context,
                mask,
                torch.arange(end - start),
                k_cache,
                v_cache,
            )
            logits.append(model.project(hidden, end - start))
    return torch.cat(logits)


def test_logits_match(
    hf_model: torch.nn.Module, our_model: LlamaModel, tokenizer: ChatTokenizer
) -> None:
    ids = tokenizer.dialogue_prompt_ids("Be brief.", [], PROMPT)
    with torch.inference_mode():
        expected = hf_model(torch.tensor([ids])).logits[0]  # (T, V)
    got = forward_contiguous(our_model, ids, split=len(ids) - 5)  # prefill, then a chunk
    assert (got - expected).abs().max().item() < LOGIT_ATOL
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_greedy_32_tokens_match(hf_model: torch.nn.Module, model_path: Path) -> None:
    config = LLMConfig(
        model_path,
        device="cpu",
        num_threads=2,
        max_new_tokens=32,
        kv_cache_tokens=2048,
        decode_dtype="same",
    )
    engine = LLMEngine(config)
    ids = engine.dialogue_prompt_ids([], PROMPT)
    engine.add_request(0, ids)
    got: list[int] = []
    while engine.has_unfinished():
        got.extend(output.token_id for output in engine.step())
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)
    expected = out[0, len(ids) :].tolist()
    assert len(got) == 32
    assert got == expected


def test_tokenizer_matches_transformers_gguf_tokenizer(
    model_path: Path, tokenizer: ChatTokenizer
) -> None:
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(
        model_path.parent, gguf_file=model_path.name
    )
    # No digits: transformers' GGUF converter drops SmolLM2's one-digit-per-token split.
    for text in ("Hello there, how are you?", "  héllo 🎉 wörld\n\nnew line", "don't stop"):
        assert tokenizer.encode(text) == hf_tokenizer.encode(text, add_special_tokens=False)


def test_end_of_turn_probe_is_the_models_probability(
    hf_model: torch.nn.Module, tokenizer: ChatTokenizer, model_path: Path
) -> None:
    """The engine's probe of the <|im_end|> after the user's words equals HF's softmax at
    that position, read from the same prefill that samples the first token."""
    config = LLMConfig(model_path, device="cpu", num_threads=2, decode_dtype="same")
    engine = LLMEngine(config)
    for request_id, words in enumerate(("What is the weather like today", "I would like a")):
        ids = engine.dialogue_prompt_ids([], words)
        (im_end,) = tokenizer.encode("<|im_end|>")
        index = len(ids) - 1 - ids[::-1].index(im_end)
        engine.add_request(request_id, ids)
        engine.probe(request_id, index)
        outputs: list = []
        while not outputs:
            outputs = engine.step()
        engine.abort(request_id)
        with torch.inference_mode():
            logits = hf_model(torch.tensor([ids[:index]])).logits[0, -1]  # (V,)
        expected = torch.softmax(logits.double(), -1)[im_end].item()
        assert outputs[0].probe_prob == pytest.approx(expected, rel=0.02), words
