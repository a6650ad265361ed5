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


def _probes(engine: LLMEngine, prompts: list[str]) -> list[float | None]:
    """Each prompt submitted as the stage does; the probe its first token carries."""
    backend = NativeBackend(engine.config, engine)
    for request_id, prompt in enumerate(prompts, start=100):
        backend.submit(request_id, prompt)
    outputs: dict[int, float | None] = {}
    while len(outputs) < len(prompts):
        for output in engine.step():
            if output.request_id not in outputs:
                outputs[output.request_id] = output.probe_prob
                engine.abort(output.request_id)
    return [outputs[request_id] for request_id in range(100, 100 + len(prompts))]


def test_backend_probes_the_end_of_the_users_words(engine: LLMEngine) -> None:
    whole = _prompt(engine, "What is the weather like today")
    cut = _prompt(engine, "I would like to book a")
    assert whole.endswith(REPLY_HEADER)
    outputs = _probes(engine, [whole, cut])
    assert outputs[0] is not None and outputs[1] is not None
    # A whole question is far likelier to be the end of the user's turn than "book a".
    assert outputs[0] > 100 * outputs[1], outputs


@pytest.mark.parametrize(
    ("marked", "bare"),
    [
        ("He was not an ill-disposed young man.", "He was not an ill-disposed young man"),
        ("And so my fellow Americans,", "And so my fellow Americans"),
        ("Well, good luck with that...", "Well, good luck with that"),
        ("Is it raining?", "Is it raining?"),
    ],
)
def test_the_probe_reads_before_whispers_closing_marks(
    engine: LLMEngine, marked: str, bare: str
) -> None:
    """The reply's prompt keeps Whisper's closing mark (without it SmolLM2 answers a
    statement by repeating it), and the probe reads P(<|im_end|>) at the last word's row,
    before the mark: the probability of the words without it (asr/turn_end.py
    `probe_text`), which the fusion's weights were fitted on. A "?" stays in."""
    with_mark, without = _probes(engine, [_prompt(engine, marked), _prompt(engine, bare)])
    assert with_mark is not None and without is not None
    assert with_mark == pytest.approx(without, rel=1e-3)


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


def test_a_turn_head_reads_the_probed_rows_hidden_state(engine: LLMEngine, tmp_path) -> None:
    """With `turn_head_path`'s head loaded, the probe reports sigmoid(w . h + b) of the
    final hidden state at the probed row (the lm_head's input) instead of P(<|im_end|>);
    a head trained on another model is refused by name."""
    import math

    import torch

    from voxrelay.llm.gguf_loader import GGUFFile, read_hparams
    from voxrelay.llm.turn_head import TurnHead, load_head

    backend = NativeBackend(engine.config, engine)
    prompt = _prompt(engine, "What is the weather like today")
    runner = engine.runner
    gguf_file = GGUFFile(engine.config.model_path)
    name, dim = str(gguf_file.metadata["general.name"]), read_hparams(gguf_file).dim
    vocab = read_hparams(gguf_file).vocab_size
    weight = torch.linspace(-0.01, 0.01, dim)
    TurnHead(weight, 0.3, name, dim, vocab).save(tmp_path / "head.npz")
    head = load_head(tmp_path / "head.npz", name, dim, vocab)
    with pytest.raises(ValueError, match="trained on"):
        load_head(tmp_path / "head.npz", "another model", dim, vocab)
    runner.keep_probe_hidden, runner.turn_head = True, None
    try:
        backend.submit(5, prompt)
        outputs: list = []
        while not outputs:
            outputs = engine.step()
        hidden = engine.probe_hidden(5)
        own = outputs[0].probe_prob
        engine.abort(5)
        runner.turn_head = head
        backend.submit(6, prompt)
        with_head = _first(engine, 6).probe_prob
    finally:
        runner.keep_probe_hidden, runner.turn_head = False, None
    assert hidden is not None and hidden.shape == (dim,)
    expected = 1 / (1 + math.exp(-(float(hidden @ weight) + 0.3)))
    assert with_head == pytest.approx(expected, rel=1e-4)
    assert with_head != pytest.approx(own, rel=1e-2)


def test_top_logprobs_of_the_next_token_give_the_probes_probability(engine: LLMEngine) -> None:
    """What a remote backend reads instead of the probe (llm/async_backend.py): the top
    log-probabilities of the token after the user's words, from a one-token request on
    the open prompt; where <|im_end|> is among them it is the probe's value."""
    import math

    backend = NativeBackend(engine.config, engine)
    full = _prompt(engine, "What is the weather like today?")
    backend.submit(7, full)
    probed = _first(engine, 7).probe_prob
    ids = engine.tokenizer.encode(full.removesuffix(REPLY_HEADER))
    engine.add_request(8, ids, max_new_tokens=1, top_logprobs=20)
    output = _first(engine, 8)
    assert output.logprobs is not None and len(output.logprobs.top) == 20
    values = [logprob for _, logprob in output.logprobs.top]
    assert values == sorted(values, reverse=True) and sum(map(math.exp, values)) <= 1 + 1e-5
    # Greedy: the sampled token is the likeliest one, with its logprob.
    assert output.logprobs.top[0] == (output.token_id, pytest.approx(output.logprobs.logprob))
    im_end = engine.tokenizer.token_id("<|im_end|>")
    (end,) = [logprob for token, logprob in output.logprobs.top if token == im_end]
    assert probed is not None and math.exp(end) == pytest.approx(probed, rel=1e-3)
    engine.add_request(9, ids, max_new_tokens=1, top_logprobs=0)  # the token's own only
    assert _first(engine, 9).logprobs.top == ()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="top_logprobs"):
        engine.add_request(10, ids, top_logprobs=21)
