"""The end-of-turn probe (llm/runner.py): one more logits row of a prefill that runs
anyway gives P(<|im_end|>) after the user's words; the stage reads it off the first token."""

from __future__ import annotations

import pytest

from voxrelay.llm.backend import REPLY_HEADER
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.native_backend import NativeBackend


def _first(engine: LLMEngine, request_id: int):
    outputs: list = []
    while not outputs:
        outputs = engine.step()
    engine.abort(request_id)
    return outputs[0]


def _prompt(engine: LLMEngine, words: str) -> str:
    backend = NativeBackend(engine.config, engine)
    return backend.render([{"role": "user", "content": words}])


def test_backend_probes_the_end_of_the_users_words(engine: LLMEngine) -> None:
    backend = NativeBackend(engine.config, engine)
    whole = _prompt(engine, "What is the weather like today")
    cut = _prompt(engine, "I would like to book a")
    assert whole.endswith(REPLY_HEADER)
    backend.submit(1, whole)
    backend.submit(2, cut)
    outputs: dict[int, float | None] = {}
    while len(outputs) < 2:
        for output in engine.step():
            outputs.setdefault(output.request_id, output.probe_prob)
    engine.abort(1)
    engine.abort(2)
    assert outputs[1] is not None and outputs[2] is not None
    # A whole question is far likelier to be the end of the user's turn than "book a".
    assert outputs[1] > 100 * outputs[2], outputs


def test_probe_survives_an_open_prompt_and_the_prefix_cache(engine: LLMEngine) -> None:
    """The stage's path: prefilled from partial words while the user speaks, completed
    at the pause; then the same prompt again, its blocks cached (a retracted reply)."""
    backend = NativeBackend(engine.config, engine)
    full = _prompt(engine, "Tell me a story about a cat")
    partial = full[: -len(REPLY_HEADER)]
    backend.open(3, partial[: len(partial) - 8])
    while engine.has_pending_work():
        engine.step()
    backend.extend(3, partial)
    backend.submit(3, full)
    first = _first(engine, 3)
    backend.submit(4, full)
    again = _first(engine, 4)
    assert first.probe_prob is not None and again.probe_prob is not None
    assert again.num_cached_tokens > 0  # the cache served the prompt's head...
    assert again.probe_prob == pytest.approx(first.probe_prob, rel=1e-3)  # ...not the probe


def test_probe_outside_the_prompt_is_an_error(engine: LLMEngine) -> None:
    ids = engine.dialogue_prompt_ids([], "hello")
    engine.add_request(5, ids, prompt_complete=False)
    with pytest.raises(ValueError, match="outside the prompt"):
        engine.probe(5, len(ids))
    engine.abort(5)


def test_no_probe_no_probability(engine: LLMEngine) -> None:
    engine.add_request(6, engine.dialogue_prompt_ids([], "hello"))
    assert _first(engine, 6).probe_prob is None
