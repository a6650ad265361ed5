"""Cut a streamed LLM reply into fragments worth synthesizing.

Time to first audio is set by the first fragment: Piper cannot start until it has
text, and a 3-word fragment synthesizes ~3x faster than a full sentence. So the first
fragment is cut early (the first clause boundary after a couple of words); later
fragments only need to be ready before the audio ahead of them runs out, so they are
cut at boundaries with enough words to keep natural prosody.

Deltas are raw token pieces ("Hel", "lo,", " wor", "ld."), so a punctuation mark is
only a boundary once the character after it has arrived: "3." may become "3.5", "Dr"
may become "Dr.", "lo," may be "1,000". The cost is one token of delay per cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from voxrelay.tts.config import TTSConfig
from voxrelay.tts.text import ABBREVIATIONS

_CLAUSE_MARKS = ",;:"
SENTENCE_MARKS = ".?!…"
_DASHES = "—–"
# Closing characters that belong to the fragment they follow: 'He said "no."' cuts
# after the quote, not between the period and the quote.
CLOSERS = "\"')]”’»"
_INITIALS = re.compile(r"^(?:[a-z]\.)+$")
_LIST_MARKER = re.compile(r"^\d+\.$")
_TERMINAL = ".,;:!?…"


def _word_count(text: str) -> int:
    # Bullets, dashes and emoji are not words: they add no speech.
    return sum(1 for token in text.split() if any(ch.isalnum() for ch in token))


def is_abbreviation_dot(text: str, dot: int) -> bool:
    """True when the "." at text[dot] ends an abbreviation, an initial or a list marker."""
    start = max(text.rfind(" ", 0, dot), text.rfind("\n", 0, dot)) + 1
    token = text[start : dot + 1].lstrip("\"'([“‘").lower()
    if token in ABBREVIATIONS or _INITIALS.match(token):
        return True
    # "1." at the start of a line numbers a list item; the item continues after it.
    at_line_start = start == 0 or text[start - 1] == "\n"
    return bool(_LIST_MARKER.match(token)) and at_line_start


@dataclass(slots=True)
class Chunker:
    """Accumulates LLM text deltas and releases fragments ready for `Voice.synthesize`.

    One Chunker serves one reply at a time: `flush()` ends the reply and resets it,
    `reset()` drops everything (barge-in).
    """

    config: TTSConfig
    _pending: str = field(default="", init=False)
    _released_any: bool = field(default=False, init=False)

    def push(self, delta: str) -> list[str]:
        """Add a text delta; return the fragments (possibly none) it completes."""
        self._pending += delta
        return self._drain(at_end=False)

    def flush(self) -> list[str]:
        """End the reply: return every remaining fragment and reset for the next one."""
        fragments = self._drain(at_end=True)
        tail = self._pending.strip()
        if tail:
            fragments.append(tail)
        self.reset()
        return fragments

    def reset(self) -> None:
        """Forget the current reply without releasing anything."""
        self._pending = ""
        self._released_any = False

    def tentative_first(self) -> str | None:
        """The reply's first fragment as it would be cut if no more text came: its last
        word taken as whole, its last mark as confirmed. None once a fragment is out or
        while there is too little text. The TTS may start on it before the next delta
        confirms the cut (tts/worker.py)."""
        if self._released_any:
            return None
        cut = self._find_cut(self._pending, at_end=True)
        if cut is None:
            return None
        return self._fragment(cut) or None

    def _drain(self, *, at_end: bool) -> list[str]:
        fragments: list[str] = []
        while (cut := self._find_cut(self._pending, at_end=at_end)) is not None:
            fragment, self._pending = self._fragment(cut), self._pending[cut:]
            if fragment:
                fragments.append(fragment)
                self._released_any = True
        return fragments

    def _fragment(self, cut: int) -> str:
        fragment = self._pending[:cut].strip()
        # A line break is heard as a sentence end (headings, list items).
        if self._pending[cut - 1] == "\n" and fragment and fragment[-1] not in _TERMINAL + CLOSERS:
            fragment += "."
        return fragment

    def _find_cut(self, text: str, *, at_end: bool) -> int | None:
        """Index just past the first acceptable boundary in `text`, or None to wait."""
        if self._released_any:
            min_words, max_words = self.config.min_fragment_words, self.config.max_fragment_words
        else:
            min_words = self.config.first_fragment_min_words
            max_words = self.config.first_fragment_max_words
        for boundary in self._boundaries(text, at_end=at_end):
            words = _word_count(text[:boundary])
            # Past max_words the word cap decides, so the cut does not depend on how
            # the text happened to be split into deltas.
            if words > max_words:
                break
            if words >= min_words:
                return boundary
        return self._word_cap(text, max_words, at_end=at_end)

    def _boundaries(self, text: str, *, at_end: bool) -> list[int]:
        """Indices just past each confirmed clause or sentence boundary, in order."""
        boundaries: list[int] = []
        index = 0
        while index < len(text):
            ch = text[index]
            end = index + 1
            if ch == "\n" or ch in _DASHES:
                boundaries.append(end)
            elif ch in _CLAUSE_MARKS or ch in SENTENCE_MARKS or ch == "-":
                # Absorb "?!", "..." and closing quotes into one boundary.
                while end < len(text) and (text[end] in SENTENCE_MARKS or text[end] in CLOSERS):
                    end += 1
                confirmed = text[end].isspace() if end < len(text) else at_end
                if ch == "-":
                    # Only a spaced hyphen is a dash; "well-known" and "-5" are words.
                    confirmed = confirmed and index > 0 and text[index - 1].isspace()
                if ch == "." and confirmed:
                    confirmed = not is_abbreviation_dot(text, index)
                if confirmed:
                    boundaries.append(end)
            index = end
        return boundaries

    @staticmethod
    def _word_cap(text: str, max_words: int, *, at_end: bool) -> int | None:
        """Index after the max_words-th complete word, or None if there are fewer."""
        words = 0
        for match in re.finditer(r"\S+", text):
            # The last token may still be growing ("Hel" -> "Hello") unless the reply ended.
            complete = match.end() < len(text) or at_end
            if complete and any(ch.isalnum() for ch in match.group()):
                words += 1
                if words >= max_words:
                    return match.end()
        return None
