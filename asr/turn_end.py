"""Does a pause end the turn? Whisper's own transcript of the words so far, read at the
SpeculativeEnd, says when clearly not.

The end of a turn is `end_silence_ms` of silence (300 ms): short, for a fast reply, but
people also pause that long in mid-sentence ("I'd like to book a ... table for two"),
and the pipeline then answers half a sentence. When the transcript of the speech before
the pause ends in a word an English utterance cannot end on (an article, a conjunction,
a possessive, a filler) or in a mark Whisper writes for a trailing-off voice ("...",
",", "-"), the stream waits `unfinished_end_silence_ms` instead (asr/stream.py).

What the rule looks at is what Whisper writes for speech cut short. Measured on the 15
real clips (every word boundary of every clip decoded alone by tiny.en, as at a pause;
docs/asr.md, "Unfinished turns"): Whisper closes most complete utterances with a period
and leaves most cut-off ones open, but not reliably in either direction ("Go forward,
10." after "ten"; "7 of Club" for a whole card). So a period only counts against the
strongest words (articles, conjunctions, possessives, fillers: "a.", "and." are never
the end), and the weaker ones (prepositions, pronouns, auxiliaries: "look at", "yes I
do" can end a turn) hold only an open transcript, and never a question. Particles that
close phrasal verbs ("turn it on", "sign me up", "log in") are not in the lists. An
open transcript of OPEN_WORDS words or more, with no digit, holds whatever its last
word: the whole turns Whisper leaves open are short answers and lists of numbers or
cards, the longer sentences it closes. The cost of a wrong hold is one slow reply; the
cost of a missed one is the status quo. English only, as the bundled Whisper models are.
"""

from __future__ import annotations

import re


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Never the last word of a finished English utterance, whatever mark follows.
_NEVER_LAST = _words(
    "a an the and but or nor because unless although though whereas if "
    "my your our their whose um uh er erm ah "
    "mr mrs ms dr"  # a title before a name; its period is not a sentence's
)
# Rarely the last word, but "what are you looking at", "yes I do", "we could" happen:
# these hold only when Whisper left the transcript open (no closing mark at all).
_RARELY_LAST = _words(
    "to of for with from into onto at as than like about via per "
    "i we you he she they it is are was were am be been being "
    "have has had do does did will would shall should can could may might must "
    "this that these those his her its which what who whom where when how very"
)
# Marks Whisper writes where the voice trails off, not where a sentence ends.
_TRAILING = ("...", "…", ",", ";", ":", "-", "—")
_CLOSING = (".", "?", "!")
# Whisper closes a sentence it heard end; the whole turns it leaves open are short
# answers ("7 of Club", "4 Queen of Clothes") and lists of numbers ("8 of spades 4 of
# close 7 of hearts", "33 4 692"), however long. Open at this many words and without a
# digit, the transcript is of a sentence cut off.
OPEN_WORDS = 5
_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"[A-Za-z0-9']+")


def unfinished(text: str) -> bool:
    """True when `text`, the transcript of speech up to a pause, clearly stops mid-turn."""
    text = text.strip()
    if not text or text.endswith("?") or text.endswith("!"):
        return False
    if text.endswith(_TRAILING):
        return True
    words = _WORD.findall(text)
    if not words:
        return False  # marks only
    last = words[-1].lower()
    if last in _NEVER_LAST:
        return True
    if text.endswith(_CLOSING):
        return False
    return last in _RARELY_LAST or (len(words) >= OPEN_WORDS and not _DIGIT.search(text))
