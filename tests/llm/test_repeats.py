"""No verbatim loops: the n-gram ban (llm/repeats.py), alone and in the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.repeats import banned_tokens

# Base's transcripts of librivox/0880 and 0920: greedy SmolLM2 answers both with a loop
# ("I'm glad to hear that. I'm glad to hear that.").
LOOPING = (
    "He was not an ill-sposed young man.",
    "Had he married a more amiable woman, he might have been made still more respectable "
    "than he was.",
)


def test_the_token_that_would_close_a_repeated_ngram_is_banned() -> None:
    assert banned_tokens([1, 2, 3, 9, 1, 2], 3) == [3]
    assert banned_tokens([1, 2, 3, 1, 2, 4, 1, 2], 3) == [3, 4]
    assert banned_tokens([5, 5, 5], 3) == [5]  # "5 5" was followed by 5
    assert banned_tokens([1, 2, 3, 9, 1, 2], 4) == []  # "9 1 2" never came before
    assert banned_tokens([1, 2], 3) == [] and banned_tokens([1, 1, 1], 0) == []


def _has_repeat(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) < len(grams)


def _replies(model_path: Path, no_repeat_ngram: int) -> list[list[int]]:
    engine = LLMEngine(
        LLMConfig(model_path, device="cpu", num_threads=2, no_repeat_ngram=no_repeat_ngram)
    )
    replies = []
    for request_id, text in enumerate(LOOPING):
        engine.add_request(request_id, engine.dialogue_prompt_ids([], text))
        tokens: list[int] = []
        while engine.has_unfinished():
            tokens += [output.token_id for output in engine.step()]
        replies.append(tokens)
    return replies


@pytest.mark.slow
def test_the_engine_says_no_ngram_of_its_reply_twice(model_path: Path) -> None:
    loose = _replies(model_path, 0)
    assert any(_has_repeat(tokens, 6) for tokens in loose), "no loop to stop: pick other turns"
    banned = _replies(model_path, 6)
    assert not any(_has_repeat(tokens, 6) for tokens in banned)
    # Up to where the loop began the replies are the same: the ban only acts on repeats.
    for before, after in zip(loose, banned, strict=True):
        assert after[:6] == before[:6]
