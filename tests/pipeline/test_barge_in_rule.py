"""The barge-in rule: how much speech over a reply cuts it, and which is a backchannel."""

import pytest

from voxrelay.pipeline.barge_in import BargeInRule, interrupting_words, is_backchannel


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


def test_a_backchannel_never_cuts_and_is_dismissed_whole():
    rule = BargeInRule(min_words=1)
    rule.speech_started(4)
    assert not rule.heard(4, "Yeah.", final=False)  # its words do not count
    assert not rule.dismisses(3, "Yeah, right.")  # not the turn spoken over the reply
    assert rule.dismisses(4, "Yeah, right.")
    assert not rule.heard(4, "Yeah, right, but wait", final=False)  # the turn is over
    rule.speech_started(5)
    assert rule.heard(5, "Okay, hold on.", final=False)  # "hold on" counts


def test_a_short_utterance_that_is_no_backchannel_is_a_turn_of_its_own():
    rule = BargeInRule(min_words=3)
    rule.speech_started(6)
    assert not rule.dismisses(6, "He was")
    assert not rule.heard(6, "He was", final=True)  # answered after the reply
    assert rule.pending_turn is None
    rule.speech_started(7)
    assert rule.heard(7, "Hold on, please.", final=True)


def test_without_min_words_nothing_is_dismissed():
    rule = BargeInRule()
    assert rule.speech_started(8)  # cut at the speech start: nothing is left to decide
    assert not rule.dismisses(8, "Mm-hmm.")


@pytest.mark.parametrize(
    "text", ["Mm-hmm.", "Mhm.", "Uh-huh.", "Uh huh", "Yeah.", "Okay.", "Oh, okay.", "I see.",
             "Right, right.", "All right.", "Hmm, got it.", "Yep", "mm hmm"],
)  # fmt: skip
def test_backchannels_as_whisper_writes_them(text):
    assert is_backchannel(text) and interrupting_words(text) == 0


@pytest.mark.parametrize(
    "text, words",
    [("Yes.", 1), ("No, no.", 2), ("Okay, stop.", 1), ("I see the problem", 2),
     ("Right now, please", 2), ("(coughs)", 0), ("...", 0), ("Thank you.", 2)],
)  # fmt: skip
def test_answers_and_interruptions_are_not_backchannels(text, words):
    assert not is_backchannel(text)
    assert interrupting_words(text) == words


def test_coughs_as_whisper_writes_them_are_not_words():
    assert interrupting_words("(coughs) *cough* [Music] - ...") == 0
    assert interrupting_words("Stop, please!") == 2


def test_out_of_range_is_refused():
    with pytest.raises(ValueError, match="barge_in_min_words"):
        BargeInRule(min_words=-1)
