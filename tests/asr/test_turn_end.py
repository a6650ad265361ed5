"""The unfinished-words rule on transcripts Whisper tiny.en wrote for real clips cut at a
word boundary, and for whole ones (docs/asr.md, "Unfinished turns")."""

import pytest

from voxrelay.asr.turn_end import (
    EAGERNESS,
    WEIGHTS,
    WEIGHTS_NO_TEXT,
    WEIGHTS_SMART_TURN,
    TurnSignals,
    Weights,
    end_probability,
    probe_text,
    unfinished,
    wait_ms,
    weights_for,
    weights_without_text,
)


@pytest.mark.parametrize(
    "text",
    [
        "He was not an",  # an article, open
        "Go somewhere and do",  # an auxiliary, open
        "Eight of spades, four of",  # a preposition, open
        "Mr. John Dashwood had then leisure to",
        "Feels like...",  # Whisper's mark for a voice trailing off
        "33, 4,",
        "He was not an ill-",
        "I'd like to order a.",  # a period does not make an article the last word
        "I want it, but.",
        "Can you book me a table for, um",
        "and Mr.",  # base, librivox/0870 cut after "Mister"
        # Open and long: whatever the last word, Whisper did not hear the sentence end.
        "He was not an ill-disposed",
        "feels like these days go on",
        "and Mr. John Dashwood had then leisure to consider",
    ],
)
def test_words_that_stop_mid_sentence_hold(text: str) -> None:
    assert unfinished(text)


@pytest.mark.parametrize(
    "text",
    [
        "He was not an ill-disposed young man.",
        "Go forward 10 meters.",
        "7 of Club",  # no mark, but a noun: a card game's whole turn
        "5 5",
        "33 for 692",  # a number is the last word (base's transcript of numbers.raw)
        "4. Queen of Clothes",
        "Had he married a more amiable woman, he might have been made still more "
        "respectable than he was.",  # an auxiliary closed by a period
        "What are you looking at?",  # a question is a whole turn
        "Yes, I do.",
        "I think so.",
        "Turn it on",  # a particle, not a preposition
        "Go somewhere in",  # ... which also means a cut-off "in" is not held
        "Feels like these days go on forever.",  # long, but closed
        "I'm in New Jersey now though.",  # the call's whole turn: speech ends on "though"
        "10 of cloves",  # open, but short: base's transcripts of whole cards
        "4 Queen of Clothes",
        "33 4 692",  # tiny.en's, of numbers.raw
        # Long, but a list with digits: base's whole turn of cards/005 with a pause put in.
        "8 of spades 4 of close, 7 of hearts",
        "",
        "   ",
    ],
)
def test_whole_turns_do_not(text: str) -> None:
    assert not unfinished(text)


def test_probe_text_drops_whispers_closing_marks_but_a_questions() -> None:
    assert probe_text(" And so my fellow Americans. ") == "And so my fellow Americans"
    assert probe_text("Is it raining?") == "Is it raining?"
    assert probe_text("Is it raining ?? ") == "Is it raining?"
    assert probe_text("Stop!") == "Stop"
    assert probe_text("ask not what your country can do for you,") == (
        "ask not what your country can do for you"
    )
    assert probe_text("Mr. Smith's car") == "Mr. Smith's car"


def test_each_signal_moves_the_end_probability_its_way() -> None:
    base = TurnSignals("Go forward ten meters.", 0.5, 1e-3)
    assert end_probability(TurnSignals(base.text, 0.5, 0.5)) > end_probability(base)
    assert end_probability(TurnSignals("Go forward ten, a", 0.5, 1e-3)) < end_probability(base)
    assert end_probability(TurnSignals("Go forward ten meters,", 0.5, 1e-3)) < end_probability(base)
    # Whisper's own P(the sentence closes): a voice that hangs reads as unfinished.
    closes, hangs = (TurnSignals(base.text, 0.5, 1e-3, prob) for prob in (0.97, 0.3))
    assert end_probability(closes) > end_probability(base) > end_probability(hangs)
    # A signal that did not come counts as its prior, not as certainty either way.
    missing = end_probability(TurnSignals(base.text, None, None))
    assert end_probability(TurnSignals(base.text, 0.5, 1e-9)) < missing
    assert missing < end_probability(TurnSignals(base.text, 0.5, 0.9))


@pytest.mark.parametrize("eagerness", list(EAGERNESS))
def test_wait_shrinks_as_the_end_grows_likelier(eagerness: str) -> None:
    waits = [wait_ms(prob / 20, eagerness, 2500) for prob in range(21)]
    assert waits == sorted(waits, reverse=True)
    floor = EAGERNESS[eagerness].min_wait_ms
    assert waits[0] == 2500 and waits[-1] == floor  # a sure end still waits a breath
    assert wait_ms(0.0, eagerness, 1200) == 1200  # the fallback caps every wait
    assert wait_ms(1.0, eagerness, 100) == 100  # and the floor too


def test_higher_eagerness_never_waits_longer() -> None:
    for prob in (x / 50 for x in range(51)):
        low, medium, high = (wait_ms(prob, e, 2500) for e in ("low", "medium", "high"))
        assert low >= medium >= high, prob


def test_smart_turn_moves_only_the_fusion_that_runs_it() -> None:
    """The default fusion gives Smart Turn no weight (it is not run); the "smart-turn"
    fusion reads it, the way its fit found."""
    sure, unsure = (TurnSignals("Go forward ten meters.", prob, 1e-3, 0.9) for prob in (0.99, 0.01))
    default, with_audio = weights_for("none"), weights_for("smart-turn")
    assert end_probability(sure, default) == end_probability(unsure, default)
    assert end_probability(sure, with_audio) > end_probability(unsure, with_audio)


def test_a_stream_that_asks_for_smart_turn_needs_it_loaded(models) -> None:
    from dataclasses import replace

    from voxrelay.asr.config import ASRConfig
    from voxrelay.asr.stream import ASRStream

    with pytest.raises(ValueError, match="turn_audio_model"):
        ASRConfig(turn_audio_model="silero")
    assert models.turn is None  # the default config does not load it
    with pytest.raises(ValueError, match="Smart Turn was not loaded"):
        ASRStream(replace(ASRConfig(), turn_audio_model="smart-turn"), models)


def test_a_missing_llm_probability_falls_back_on_the_fit_without_it() -> None:
    """The shipped fusions fall back on the no-text fit; it reads Whisper's closing
    probability and the words' rule; weights with no text term are their own fallback,
    and hand-made ones with a text term have none (the silence rule decides)."""
    assert weights_without_text(WEIGHTS) == weights_without_text(WEIGHTS_SMART_TURN)
    assert weights_without_text(WEIGHTS) == WEIGHTS_NO_TEXT and not WEIGHTS_NO_TEXT.text
    audio_only = Weights(1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert weights_without_text(audio_only) is audio_only
    assert weights_without_text(Weights(0.0, 0.5, 0.5, -1.0, 0.0, 0.0)) is None
    closes, hangs = (TurnSignals("Go forward ten meters.", None, None, p) for p in (0.98, 0.8))
    assert end_probability(closes, WEIGHTS_NO_TEXT) > end_probability(hangs, WEIGHTS_NO_TEXT)
    cut = TurnSignals("Go forward ten meters and", None, None, 0.98)
    assert end_probability(cut, WEIGHTS_NO_TEXT) < end_probability(hangs, WEIGHTS_NO_TEXT)
