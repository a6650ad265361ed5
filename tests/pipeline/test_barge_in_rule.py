"""The barge-in rule: how much speech over a reply cuts it."""

import pytest

from voxrelay.pipeline.barge_in import BargeInRule, count_words


def test_off_by_default_the_speech_start_cuts_at_once():
    rule = BargeInRule()
    assert rule.speech_started(3)


def test_min_words_waits_for_a_partial_with_enough_words():
    rule = BargeInRule(min_words=2)
    assert not rule.speech_started(3)
    assert not rule.heard(3, "Mhm.", final=False)
    assert not rule.heard(2, "wait a second", final=False)  # another turn's words
    assert rule.heard(3, "Wait, what", final=False)
    assert not rule.heard(3, "Wait, what about", final=False)  # already cut: once only


def test_a_short_utterance_never_cuts_and_the_next_one_starts_afresh():
    rule = BargeInRule(min_words=2)
    rule.speech_started(4)
    assert not rule.heard(4, "Yeah.", final=True)
    assert not rule.heard(4, "Yeah, right", final=False)  # the turn is over
    rule.speech_started(5)
    assert rule.heard(5, "Hold on.", final=True)


def test_coughs_as_whisper_writes_them_are_not_words():
    assert count_words("(coughs) *cough* [Music] - ...") == 0
    assert count_words("Stop, please!") == 2


def test_out_of_range_is_refused():
    with pytest.raises(ValueError, match="barge_in_min_words"):
        BargeInRule(min_words=-1)
