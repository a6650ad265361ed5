"""The backend protocol with the native engine: open / extend / submit equals one shot."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxrelay.llm.backend import REPLY_HEADER, create_backend
from voxrelay.llm.config import LLMConfig
from voxrelay.llm.dialogue import HISTORY_LOW_WATER, Dialogue, llm_config
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.native_backend import NativeBackend


def run(backend: NativeBackend, request_id: int) -> list[int]:
    tokens = []
    while backend.has_pending_work():
        tokens += [out.token_id for out in backend.step() if out.request_id == request_id]
    return tokens


def test_open_extend_submit_equals_one_shot(engine: LLMEngine) -> None:
    backend = NativeBackend(engine.config, engine)
    messages = [{"role": "user", "content": "Name three colours of the rainbow, please."}]
    prompt = backend.render(messages)
    assert prompt.endswith(REPLY_HEADER)
    backend.submit(1, prompt)
    expected = run(backend, 1)
    words = prompt.removesuffix(REPLY_HEADER)
    backend.open(2, words[: words.index("three")])
    while backend.has_pending_work():
        backend.step()
    assert backend.prefilled_tokens(2) > 10
    backend.extend(2, words[: words.index("please")] + "plea")  # a word still unstable
    backend.extend(2, words[: words.index("please")] + "pleasant")  # revised: replaced
    backend.submit(2, prompt)
    assert run(backend, 2) == expected


def test_abort_open_and_running(engine: LLMEngine) -> None:
    backend = NativeBackend(engine.config, engine)
    prompt = backend.render([{"role": "user", "content": "Tell me a long story."}])
    backend.open(3, prompt.removesuffix(REPLY_HEADER))
    assert backend.abort(3) and not backend.abort(3)
    backend.submit(4, prompt)
    backend.step()
    assert backend.abort(4) and not engine.has_unfinished()


def test_dialogue_prompt_fits_the_budget(engine: LLMEngine) -> None:
    backend = NativeBackend(engine.config, engine)
    dialogue = Dialogue()
    dialogue.exchanges = [("word " * 100, "reply " * 100)] * 3
    prompt = dialogue.prompt_text(backend, engine.config, "And now?")
    budget = engine.config.max_context_tokens - engine.config.max_new_tokens
    assert backend.count_tokens(prompt) <= budget and len(dialogue.exchanges) < 3
    long_turn = " ".join(f"w{index}" for index in range(400))
    prompt = Dialogue().prompt_text(backend, engine.config, long_turn)
    assert backend.count_tokens(prompt) <= budget and "w399" in prompt and "w0 " not in prompt


def test_backend_settings_from_stage_json(model_path: Path) -> None:
    config = llm_config({"backend": "openai", "openai": {"base_url": "http://h:1/v1"}})
    assert config.backend == "openai" and config.openai.base_url == "http://h:1/v1"
    with pytest.raises(ValueError, match="backend must be one of"):
        LLMConfig(model_path, backend="llamacpp")
    with pytest.raises(ValueError, match="base_url"):
        llm_config({"backend": "openai", "openai": {"base_url": "h:1"}})


def test_create_backend_native(model_path: Path) -> None:
    config = LLMConfig(model_path, device="cpu", kv_cache_tokens=2048, max_context_tokens=512)
    backend = create_backend(config)
    assert isinstance(backend, NativeBackend)
    backend.close()


def test_a_full_history_is_cut_deep_enough_to_stay_cached_for_several_turns(
    engine: LLMEngine,
) -> None:
    """Cutting just under the budget would move the prompt's head (and miss the prefix
    cache) on every turn once the history is full; cutting to the low-water mark keeps
    it for the turns the freed room holds."""
    backend = NativeBackend(engine.config, engine)
    dialogue = Dialogue()
    budget = engine.config.max_context_tokens - engine.config.max_new_tokens
    exchange = (f"Question 0 {'ask ' * 20}", f"Answer 0 {'say ' * 30}")
    exchange_tokens = sum(backend.count_tokens(text) for text in exchange)
    heads = []
    for turn in range(60):
        user = f"Question {turn} " + "ask " * 20
        prompt = dialogue.prompt_text(backend, engine.config, user)
        assert backend.count_tokens(prompt) <= budget
        heads.append(dialogue.exchanges[0][0] if dialogue.exchanges else "")
        dialogue.add(turn, user, f"Answer {turn} " + "say " * 30)
    cuts = sum(1 for a, b in zip(heads, heads[1:], strict=False) if a and a != b)
    turns_per_refill = (1 - HISTORY_LOW_WATER) * budget / exchange_tokens
    assert turns_per_refill >= 2
    assert 0 < cuts <= 60 / int(turns_per_refill) + 1, heads
    assert len(dialogue.exchanges) >= int(0.5 * budget / exchange_tokens)  # still a history
