"""Turn LLM reply text into text a voice can read.

LLMs answer in markdown with URLs, emoji and symbols that espeak either spells out
("asterisk asterisk") or skips unpredictably. This module is a small, ordered list of
regex rewrites; it works on one fragment at a time, so every rule is local to a line.
"""

from __future__ import annotations

import re

# Whole fenced code blocks are dropped: code read aloud is noise. A fence split across
# fragments leaves only its marker line behind, which the next rule removes.
_CODE_BLOCK = re.compile(r"```.*?```", re.DOTALL)
_FENCE = re.compile(r"```[^\n`]*")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"\b(?:https?://|www\.)[^\s)>\]]+", re.IGNORECASE)
_INLINE_CODE = re.compile(r"`([^`]*)`")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*", re.MULTILINE)
_BULLET = re.compile(r"^\s*[-*+•]\s+", re.MULTILINE)
_NUMBERED = re.compile(r"^\s*(\d+)[.)]\s+", re.MULTILINE)
_EMPHASIS = re.compile(r"\*+|__+|~~")
_EMOJI = re.compile(
    "[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0f\u200d\u20e3]", re.UNICODE
)

_MONEY = re.compile(r"\$(\d+)(?:\.(\d{2}))?\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_DECIMAL = re.compile(r"(\d)\.(\d+)")
_PERCENT = re.compile(r"\s*%")

# Abbreviations whose "." is not a sentence end; the chunker uses the same table so
# it never cuts a fragment after "Dr.". Keys are lowercase.
ABBREVIATIONS: dict[str, str] = {
    "dr.": "Doctor",
    "mr.": "Mister",
    "mrs.": "Missus",
    "ms.": "Miz",
    "prof.": "Professor",
    "jr.": "Junior",
    "sr.": "Senior",
    "e.g.": "for example",
    "i.e.": "that is",
    "etc.": "et cetera",
    "vs.": "versus",
    "approx.": "approximately",
    "no.": "number",
    "fig.": "figure",
}
_ABBREVIATION = re.compile(
    r"(?<![\w.])(" + "|".join(re.escape(a) for a in ABBREVIATIONS) + r")(?=[\s,;:)]|$)",
    re.IGNORECASE,
)
_SYMBOLS = {"&": " and ", "@": " at ", "=": " equals ", "+": " plus "}
_SYMBOL = re.compile("|".join(re.escape(s) for s in _SYMBOLS))
_TERMINAL = ".,;:!?"


def _abbreviation(match: re.Match[str]) -> str:
    spoken = ABBREVIATIONS[match.group(1).lower()]
    # "etc." closing a sentence still ends it: keep the period so the pause survives.
    tail = match.string[match.end() :]
    if match.group(1).lower() == "etc." and (tail == "" or re.match(r"\s+[A-Z]", tail)):
        return spoken + "."
    return spoken


def _money(match: re.Match[str]) -> str:
    dollars, cents = match.group(1), match.group(2)
    unit = "dollar" if dollars == "1" else "dollars"
    return f"{dollars} {unit} {cents} cents" if cents else f"{dollars} {unit}"


def _decimal(match: re.Match[str]) -> str:
    # Digits after the point are read one by one: "3.14" is "3 point 1 4", not "fourteen".
    return f"{match.group(1)} point {' '.join(match.group(2))}"


def _join_lines(text: str) -> str:
    # A line break in a reply (list item, heading) is heard as a sentence end.
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]
    closed = [line if line[-1] in _TERMINAL else line + "." for line in lines[:-1]]
    return " ".join([*closed, *lines[-1:]])


def clean_for_speech(text: str) -> str:
    """Return `text` with markdown, URLs and emoji removed and numbers made speakable.

    Returns "" when nothing speakable is left (a lone fence, an emoji).
    """
    text = _CODE_BLOCK.sub(" ", text)
    text = _FENCE.sub(" ", text)
    text = _IMAGE_OR_LINK.sub(r"\1", text)
    text = _URL.sub("a link", text)
    text = _INLINE_CODE.sub(r"\1", text)
    text = _HEADING.sub("", text)
    text = _BULLET.sub("", text)
    text = _NUMBERED.sub(r"\1, ", text)
    text = _EMPHASIS.sub("", text)
    text = _EMOJI.sub("", text)
    text = _join_lines(text)
    text = _ABBREVIATION.sub(_abbreviation, text)
    text = _MONEY.sub(_money, text)
    text = _THOUSANDS.sub("", text)
    text = _DECIMAL.sub(_decimal, text)
    text = _PERCENT.sub(" percent", text)
    text = _SYMBOL.sub(lambda m: _SYMBOLS[m.group(0)], text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\s+([.,;:!?])", r"\1", text).strip()
    return text if re.search(r"[A-Za-z0-9]", text) else ""
