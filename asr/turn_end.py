"""Does a pause end the turn? Four signals, read as the pause begins.

1. The words' rules (`unfinished`): Whisper's own transcript of the speech so far ends
   in a word an English turn does not end on, or in a mark of a trailing-off voice.
   Such a pause waits for `turn_fallback_ms` (no reply is started for those words).
2. The audio, when `turn_audio_model = "smart-turn"`: Smart Turn v3.2's P(end of turn)
   on the last 8 s (asr/turn_model.py). Not run by default: with signal 4 in, its fitted
   weight is 0.00-0.01 on these sets (docs/asr.md, "Session 18").
3. The LLM's own P(<|im_end|>) after the user's words, read from the prefill that
   starts the speculative reply (llm/runner.py probes; no extra forward pass). It is
   read after the words without Whisper's closing period (`probe_text`): Whisper
   closes nearly every decode that stops at a pause with a period, so the mark says
   little, and without it the model's probability separates cut-off words from whole
   ones better (docs/asr.md, "Learned end of turn"). A question keeps its "?". The
   reply's prompt keeps the mark: the probe reads the row of the last word, before it
   (without it, SmolLM2 answers a statement by repeating it; docs/llm.md, "Session
   31").
4. Whisper's own P(the sentence closes) after the last word it wrote: a closing mark or
   the end of text against a trailing mark, from the decode that made the transcript
   (asr/textdecoder.py; no extra cost). Whisper hears the voice fall or hang.

`end_probability` fuses them with a logistic model (WEIGHTS, fitted by
`python -m bench.turn_fit --fit` on the natural-pause and splice sets); `wait_ms` turns
that into how long this pause may last before it ends the turn: a breath's length when
confident, a while when unsure, else the fallback. The eagerness picks the thresholds.

What the words' rule looks at is what Whisper writes for speech cut short. Measured on
the 15 real clips (every word boundary decoded alone, as at a pause; docs/asr.md,
"Unfinished turns"): Whisper closes most complete utterances with a period and leaves
most cut-off ones open, but not reliably in either direction ("Go forward, 10." after
"ten"; "7 of Club" for a whole card). So a period only counts against the strongest
words (articles, conjunctions, possessives, fillers: "a.", "and." are never the end),
and the weaker ones (prepositions, pronouns, auxiliaries: "look at", "yes I do" can end
a turn) hold only an open transcript, and never a question. Particles that close
phrasal verbs ("turn it on", "sign me up", "log in") are not in the lists. An open
transcript of OPEN_WORDS words or more, with no digit, holds whatever its last word.
English only, as the bundled Whisper models are.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Never the last word of a finished English utterance, whatever mark follows. Not
# "though": spoken English ends on it ("I'm in New Jersey now though.", a whole turn of
# the natural set's call that the rule held for the fallback).
_NEVER_LAST = _words(
    "a an the and but or nor because unless although whereas if "
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


# What `probe_text` takes off the end of the user's words (a "?" only when more follows).
TRAILING_MARKS = ".,?!;:…-— "


def probe_text(text: str) -> str:
    """The user's words as the end-of-turn probe reads them: without closing marks, but
    a question keeps its "?". Whisper closes nearly every decode that stops at a pause
    with a period, so a period says little; it writes "?" only for a question, and
    without it SmolLM2 reads "What time is it" as unfinished (P(<|im_end|>) 1.7e-6,
    0.24 with it; docs/asr.md, "Session 15")."""
    stripped = text.strip()
    if stripped.endswith("?"):
        return stripped.rstrip("?").rstrip() + "?"
    return stripped.rstrip(TRAILING_MARKS).strip()


def is_trailing_mark(piece: str) -> bool:
    """Whether `piece` (one token's text) is only marks `probe_text` drops: the probe
    is read before such tokens at the end of the user's words."""
    return bool(piece) and "?" not in piece and not piece.strip(TRAILING_MARKS)


@dataclass(frozen=True, slots=True)
class Eagerness:
    """End probability at or above `commit_at`: the pause ends the turn once its silence
    reaches `min_wait_ms`; at or below `fallback_at`: it waits the whole fallback;
    between, the wait rises linearly from `min_wait_ms` to the fallback.

    `min_wait_ms`: no pause ends a turn sooner, however sure the signals are. Breaths
    between phrases last 200-300 ms (5 of the natural set's 13 mid-turn pauses end by
    290 ms) and the signals cannot tell a phrase from a turn there; LiveKit's agents wait
    at least 500 ms for the same reason."""

    commit_at: float
    fallback_at: float
    min_wait_ms: int


# Chosen on the sets of `bench.turn_end` (docs/asr.md has the trade-off each one makes).
EAGERNESS = {
    "high": Eagerness(0.6, 0.2, 300),
    "medium": Eagerness(0.7, 0.3, 300),
    "low": Eagerness(0.8, 0.4, 300),
}


@dataclass(frozen=True, slots=True)
class Weights:
    """Logistic fusion: P(end) = sigmoid(sum of weight x feature + bias)."""

    audio: float  # x logit(Smart Turn probability)
    text: float  # x logit of the LLM's P(end of turn) (its head's, or P(<|im_end|>))
    closing: float  # x logit of Whisper's P(the sentence closes after the last word)
    unfinished: float  # the words' rule fired (only a pause decided after the fallback)
    question: float  # the transcript ends in "?" or "!"
    bias: float


# `python -m bench.turn_fit --fit` prints these (class-balanced, L2 0.3; session 17: 281
# pauses of the three sets, 146 of them true ends). With Whisper's closing probability
# in, Smart Turn's weight fell from 0.1 to 0.01: on these sets what it hears, Whisper
# hears better (docs/asr.md, "Session 17"). A transcript ending in a trailing mark is no
# feature of its own any more: the words' rule always holds it (1 pause in 281). That
# fit counted the ends of the splice set's continued-reading clips as true ends (fixed in
# bench.turn_end since session 25); refitted without them, the replay was another point
# on the same trade-off, not a better one, so these stay (docs/asr.md, "Session 25").
WEIGHTS_SMART_TURN = Weights(audio=0.01, text=0.19, closing=0.67, unfinished=-1.91,
                             question=-1.54, bias=0.77)  # fmt: skip
# The default fusion, without Smart Turn: the same fit with its term dropped (a refit
# without it in session 18 gave audio 0.00 and the other weights within 0.12; replayed,
# these are the better of the two on the natural set: docs/asr.md, "Session 18").
WEIGHTS = Weights(audio=0.0, text=0.19, closing=0.67, unfinished=-1.91, question=-1.54,
                  bias=0.77)  # fmt: skip


# The fusion for a pause whose LLM probability did not come (a backend that does not
# probe, a server without logprobs, a probe too late): the same fit with the text term
# dropped (session 21, 281 pauses; Smart Turn's weight in that fit is -0.04, so both
# fusions above fall back to this one). Replayed at medium against the 300 ms silence
# rule that such a pause ended on before: natural 15.4% cut at 675 ms against 53.8% at
# 410, splice 29.9% / 829 against 41.9% / 365, requests 20% / 300 against 40% / 300
# (docs/asr.md, "Session 21").
WEIGHTS_NO_TEXT = Weights(audio=0.0, text=0.0, closing=0.84, unfinished=-2.87, question=-0.08,
                          bias=-1.92)  # fmt: skip


def weights_for(turn_audio_model: str) -> Weights:
    """The fitted fusion for an ASRConfig.turn_audio_model."""
    return WEIGHTS_SMART_TURN if turn_audio_model == "smart-turn" else WEIGHTS


def weights_without_text(weights: Weights) -> Weights | None:
    """The fusion to decide a pause by when the LLM's probability is missing: `weights`
    itself if it has no text term, the fitted no-text fusion for the shipped ones, and
    None (no fit to fall back on: the pause ends on the silence rule) for any other."""
    if not weights.text:
        return weights
    if weights in (WEIGHTS, WEIGHTS_SMART_TURN):
        return WEIGHTS_NO_TEXT
    return None


# A signal that did not come (no LLM probe from a remote backend, no audio model):
# its feature takes this value, the median of the fitted sets.
TEXT_LOGIT_PRIOR = 0.0
# The text probability's logit is clipped to +-TEXT_CLIP (P(<|im_end|>) of a model with
# no head reaches 1e-9; 23 is ~1e-10).
TEXT_CLIP = 23.0


@dataclass(frozen=True, slots=True)
class TurnSignals:
    text: str  # Whisper's transcript of the speech before the pause
    audio_prob: float | None  # Smart Turn
    text_prob: float | None  # the LLM's P(<|im_end|>)
    closing_prob: float | None = None  # Whisper's P(the sentence closes after the last word)

    def features(self) -> tuple[float, float, float, float, float]:
        audio = 0.0 if self.audio_prob is None else _logit(self.audio_prob)
        text = TEXT_LOGIT_PRIOR if self.text_prob is None else _logit(self.text_prob, TEXT_CLIP)
        closing = 0.0 if self.closing_prob is None else _logit(self.closing_prob)
        stripped = self.text.strip()
        return (
            audio,
            text,
            closing,
            float(unfinished(self.text)),
            float(stripped.endswith(("?", "!"))),
        )


def end_probability(signals: TurnSignals, weights: Weights = WEIGHTS) -> float:
    audio, text, closing, held, question = signals.features()
    z = (
        weights.audio * audio
        + weights.text * text
        + weights.closing * closing
        + weights.unfinished * held
        + weights.question * question
        + weights.bias
    )
    return 1.0 / (1.0 + math.exp(-z))


def wait_ms(end_prob: float, eagerness: str, fallback_ms: int) -> int:
    """How much silence this pause may reach before it ends the turn."""
    level = EAGERNESS[eagerness]
    floor = min(level.min_wait_ms, fallback_ms)
    if end_prob >= level.commit_at:
        return floor
    share = (level.commit_at - end_prob) / (level.commit_at - level.fallback_at)
    return round(floor + (fallback_ms - floor) * min(share, 1.0))


def _logit(prob: float, clip: float = 9.21) -> float:
    """log(p / (1 - p)), clipped to +-clip (9.21: p within 1e-4 of 0 or 1)."""
    if prob <= 0.0 or prob >= 1.0:
        return math.copysign(clip, prob - 0.5)
    return min(max(math.log(prob / (1 - prob)), -clip), clip)
