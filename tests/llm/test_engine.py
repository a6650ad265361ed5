"""Engine behaviour with the real model: streaming, abort, open prompts, batching, caching."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.sequence import TokenOutput

QUESTION = "What is the capital of France?"


def run_to_end(engine: LLMEngine) -> dict[int, list[TokenOutput]]:
    outputs: dict[int, list[TokenOutput]] = {}
    for _ in range(200):
        if not engine.has_unfinished():
            return outputs
        for output in engine.step():
            outputs.setdefault(output.request_id, []).append(output)
    raise AssertionError("engine did not finish within 200 steps")


def generate(engine: LLMEngine, prompt: list[int], max_new_tokens: int = 8) -> list[int]:
    engine.add_request(999, prompt, max_new_tokens=max_new_tokens)
    return [output.token_id for output in run_to_end(engine)[999]]


def test_streams_one_token_per_step(engine: LLMEngine) -> None:
    prompt = engine.dialogue_prompt_ids([], QUESTION)
    engine.add_request(1, prompt, max_new_tokens=20)
    first = engine.step()  # prefill samples the first token in the same pass
    assert len(first) == 1 and first[0].request_id == 1 and not first[0].finished
    outputs = first + run_to_end(engine)[1]
    assert outputs[-1].finished and outputs[-1].finish_reason == "stop"
    assert all(not output.finished for output in outputs[:-1])
    assert outputs[-1].token_id == engine.tokenizer.token_id("<|im_end|>")
    text = "".join(output.text for output in outputs)
    assert text == engine.tokenizer.decode([o.token_id for o in outputs], skip_special_tokens=True)
    assert "Paris" in text


def test_max_new_tokens_ends_with_length(engine: LLMEngine) -> None:
    engine.add_request(2, engine.dialogue_prompt_ids([], "Tell me a long story."), max_new_tokens=3)
    outputs = run_to_end(engine)[2]
    assert len(outputs) == 3 and outputs[-1].finish_reason == "length"


def test_abort_stops_a_request(engine: LLMEngine) -> None:
    engine.add_request(
        3, engine.dialogue_prompt_ids([], "Tell me a long story."), max_new_tokens=50
    )
    engine.step()
    engine.step()
    assert engine.abort(3)
    assert not engine.has_unfinished() and engine.step() == []
    assert not engine.abort(3)  # second abort is a no-op
    # An open prompt can be aborted too, and its id reused afterwards.
    engine.add_request(3, [1, 2, 3], prompt_complete=False)
    engine.abort(3)
    engine.add_request(3, [1, 2, 3], max_new_tokens=1)
    run_to_end(engine)


def test_open_prompt_then_decode_equals_one_shot(engine: LLMEngine) -> None:
    prompt = engine.dialogue_prompt_ids([], "Name three colours of the rainbow, please.")
    expected = generate(engine, prompt)
    pieces = [prompt[:17], prompt[17:18], prompt[18:35], prompt[35:]]
    engine.add_request(4, pieces[0], max_new_tokens=8, prompt_complete=False)
    assert engine.step() == []  # prefill of the partial prompt, nothing sampled
    for piece in pieces[1:]:
        engine.append_tokens(4, piece)
        while engine.has_pending_work():
            assert engine.step() == []
    # Everything but the last token is already in the KV cache.
    seq = engine.scheduler.running[0]
    assert seq.num_computed_tokens == len(prompt) - 1
    engine.start_decode(4)
    got = [output.token_id for output in run_to_end(engine)[4]]
    assert got == expected


def test_a_revised_open_prompt_keeps_what_it_shares(engine: LLMEngine) -> None:
    """A revised word (the ASR's ROLLBACK) replaces the open prompt in place: positions
    before the first changed token keep their K/V, even inside an unfilled block, and
    the reply is the one a fresh request for the new prompt gets."""
    heard = engine.dialogue_prompt_ids([], "Name three colours of the rainbow")
    revised = engine.dialogue_prompt_ids([], "Name three colors of the sky, please.")
    expected = generate(engine, revised)
    shared = next(i for i, (a, b) in enumerate(zip(heard, revised, strict=False)) if a != b)
    block = engine.config.kv_block_size
    assert shared % block, "the revision should fall inside a block"
    engine.add_request(5, heard[:-5], max_new_tokens=8, prompt_complete=False)
    while engine.has_pending_work():
        engine.step()
    (seq,) = [s for s in engine.scheduler.running if s.request_id == 5]
    if seq.num_computed_tokens // block > shared // block:  # the cut's block is full
        shared -= shared % block
    engine.replace_prompt(5, revised)
    assert seq.num_computed_tokens == shared
    engine.start_decode(5)
    first = engine.step()
    assert seq.num_computed_tokens == len(revised)  # the rest, in the reply's first step
    assert [o.token_id for o in first + run_to_end(engine)[5]] == expected
    with pytest.raises(ValueError, match="complete"):
        engine.add_request(6, revised, max_new_tokens=1)
        engine.replace_prompt(6, heard)
    engine.abort(6)


def test_concurrent_requests_match_each_alone(engine: LLMEngine) -> None:
    prompts = [
        engine.dialogue_prompt_ids([], QUESTION),
        engine.dialogue_prompt_ids([], "Why is the sky blue? Answer briefly."),
    ]
    alone = [generate(engine, prompt) for prompt in prompts]
    engine.add_request(10, prompts[0], max_new_tokens=8)
    first = engine.step()  # request 10 is decoding when request 11 arrives
    engine.add_request(11, prompts[1], max_new_tokens=8)
    outputs = run_to_end(engine)
    assert [o.token_id for o in first + outputs[10]] == alone[0]
    assert [o.token_id for o in outputs[11]] == alone[1]


def test_prefix_cache_reuses_dialogue_and_keeps_outputs(engine: LLMEngine) -> None:
    history = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "The capital of France is Paris."},
    ]
    prompt = engine.dialogue_prompt_ids(history, "And of Italy?")
    engine.block_manager.enable_prefix_caching = False
    try:
        cold = generate(engine, prompt)
    finally:
        engine.block_manager.enable_prefix_caching = True
    assert generate(engine, prompt) == cold  # fills the cache
    engine.add_request(20, prompt, max_new_tokens=8)
    first = engine.step()
    # Every full block came from the cache; only the tail was computed.
    block = engine.config.kv_block_size
    assert engine.num_cached_tokens(20) == (len(prompt) - 1) // block * block
    rest = run_to_end(engine)[20]
    assert [o.token_id for o in first + rest] == cold


def test_invalid_requests_are_rejected(engine: LLMEngine) -> None:
    with pytest.raises(ValueError, match="empty"):
        engine.add_request(30, [])
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request(30, [10**6])
    with pytest.raises(ValueError, match="max_context_tokens"):
        engine.add_request(30, [5] * 600)
    engine.add_request(30, [5, 6])
    with pytest.raises(ValueError, match="already active"):
        engine.add_request(30, [5])
    with pytest.raises(ValueError, match="complete"):
        engine.append_tokens(30, [7])
    engine.abort(30)
    with pytest.raises(ValueError, match="not active"):
        engine.start_decode(30)


@pytest.mark.slow
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_preemption_under_kv_pressure_keeps_outputs(model_path: Path, prefix_caching: bool) -> None:
    # 6 blocks of 16 tokens: two ~40-token prompts fill them, and growing past 48 tokens
    # forces a preemption (a sequence that cannot get blocks at all just waits).
    config = LLMConfig(
        model_path,
        device="cpu",
        num_threads=2,
        max_new_tokens=24,
        max_context_tokens=96,
        kv_cache_tokens=96,
        enable_prefix_caching=prefix_caching,
        decode_dtype="same",
    )
    engine = LLMEngine(config)
    questions = [QUESTION, "Why is the sky blue?", "What is two plus two?"]
    prompts = [engine.dialogue_prompt_ids([], question) for question in questions]
    assert all(33 <= len(prompt) <= 48 for prompt in prompts)
    alone = [generate(engine, prompt, max_new_tokens=24) for prompt in prompts]
    for request_id, prompt in enumerate(prompts):
        engine.add_request(request_id, prompt)
    outputs = run_to_end(engine)
    if not prefix_caching:
        assert engine.scheduler.num_preemptions > 0
    assert [[o.token_id for o in outputs[i]] for i in range(3)] == alone
    manager = engine.block_manager
    assert manager.num_free_blocks == len(manager.blocks)


def test_cpu_state_without_cuda(engine: LLMEngine) -> None:
    if not torch.cuda.is_available():
        assert engine.state.device.type == "cpu" and engine.state.dtype == torch.float32
    assert engine.state.num_threads == 2


def test_sampling_with_temperature(engine: LLMEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = engine.runner
    logits = torch.randn(3, engine.tokenizer.vocab_size)
    monkeypatch.setattr(runner, "temperature", 0.8)
    monkeypatch.setattr(runner, "top_k", 1)
    assert runner._sample(logits) == logits.argmax(-1).tolist()  # top-1 is greedy
    monkeypatch.setattr(runner, "top_k", 50)
    top = logits.topk(50, dim=-1).indices
    for row, token in enumerate(runner._sample(logits)):
        assert token in top[row].tolist()


def test_bfloat16_decode_weights_stay_close_to_float32(model_path: Path) -> None:
    """The default narrow decode copy: same opening words as exact float32 decoding."""

    def generate(decode_dtype: str) -> list[int]:
        config = LLMConfig(model_path, device="cpu", num_threads=2, max_new_tokens=8,
                           max_context_tokens=512, kv_cache_tokens=1024,
                           decode_dtype=decode_dtype)  # fmt: skip
        engine = LLMEngine(config)
        engine.add_request(1, engine.dialogue_prompt_ids([], "What is the capital of France?"))
        tokens: list[int] = []
        while engine.has_pending_work():
            tokens += [o.token_id for o in engine.step()]
        return tokens

    exact, narrow = generate("same"), generate("bfloat16")
    assert len(narrow) == 8
    assert narrow[:4] == exact[:4]
