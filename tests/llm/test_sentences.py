"""A spoken reply ends after max_sentences sentences (llm/sentences.py), in the LLM
stage with the real model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llm.stage import record, stage_reply
from voxrelay.ipc.records import FINAL_INFO, RecordKind
from voxrelay.llm.sentences import SentenceLimit, sentence_starts, within


def test_sentence_starts_skip_abbreviations_decimals_and_keep_closers() -> None:
    text = 'Dr. Smith is 3.5 m tall. "Really?" Yes! e.g. this'
    # Not after "Dr." nor inside "3.5" nor after "e.g.": three sentences begin.
    assert [text[i:][:6] for i in sentence_starts(text)] == ['"Reall', "Yes! e", "e.g. t"]
    assert sentence_starts("One two.") == [] and sentence_starts("One. Two") == [5]


def test_within_cuts_after_the_last_allowed_sentence() -> None:
    assert within("I'm glad. I'm glad to hear that. More.", 2) == (
        "I'm glad. I'm glad to hear that.",
        True,
    )
    assert within("One. Two.", 2) == ("One. Two.", False)  # no third sentence begun
    assert within("One. Two. Three.", 0) == ("One. Two. Three.", False)


def test_the_limit_stops_at_the_token_that_begins_a_sentence_too_many() -> None:
    limit = SentenceLimit(2)
    deltas = ["I", "'m", " sorry", ".", " I", " can", "'t", ".", " You", " could"]
    admitted = [limit.admit(delta) for delta in deltas]
    assert admitted[:8] == [(delta, False) for delta in deltas[:8]]
    assert admitted[8] == ("", True)
    assert limit.text == "I'm sorry. I can't."
    # The boundary and the next sentence in one delta: the mark is kept, the rest is not.
    limit = SentenceLimit(1)
    assert limit.admit("Yes") == ("Yes", False)
    assert limit.admit("! Sure") == ("!", True)


def _stage_reply(model_path: Path, max_sentences: int) -> tuple[str, str]:
    settings = {"model_path": str(model_path), "device": "cpu", "num_threads": 2,
                "max_sentences": max_sentences}  # fmt: skip
    final = FINAL_INFO.pack(5.0) + b"Please transfer me to a human agent."
    return stage_reply(settings, [record(RecordKind.FINAL, final)])


@pytest.mark.slow
def test_the_llm_stage_ends_a_reply_after_two_sentences(model_path: Path) -> None:
    whole, whole_reason = _stage_reply(model_path, 0)
    assert len(sentence_starts(whole)) >= 2, whole  # the model runs on past two
    short, reason = _stage_reply(model_path, 2)
    assert reason == "sentences" and whole_reason != "sentences"
    assert short == within(whole, 2)[0] and len(sentence_starts(short)) == 1, short
