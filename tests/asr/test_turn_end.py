"""The unfinished-words rule on transcripts Whisper tiny.en wrote for real clips cut at a
word boundary, and for whole ones (docs/asr.md, "Unfinished turns")."""

import pytest

from voxrelay.asr.turn_end import unfinished


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
