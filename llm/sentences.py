"""A spoken reply ends after `max_sentences` sentences.

The system prompt asks for one or two short spoken sentences; SmolLM2-135M often runs
on to `max_new_tokens` (60 tokens, ~20 s of speech) and then stops mid-sentence: 5 of
38 greedy replies in a one-off run (docs/llm.md, "What a reply says"). The LLM stage ends
the reply where the next sentence would begin: that token is not sent, and the request
is aborted (its KV stays in the prefix cache). A boundary is the TTS chunker's: a
sentence mark that is not an abbreviation's dot ("Mr.", "e.g."), then whitespace, then
the next sentence's first character, so "3.5" and "Dr. Smith" go on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from voxrelay.tts.chunker import CLOSERS, SENTENCE_MARKS, is_abbreviation_dot

# A run of sentence marks, closing quotes or brackets, whitespace, then the start of
# the next sentence (the chunker's marks and closers).
_BOUNDARY = re.compile(f"[{re.escape(SENTENCE_MARKS)}]+[{re.escape(CLOSERS)}]*\\s+(?=\\S)")


def sentence_starts(text: str) -> list[int]:
    """Indices where a sentence after the first begins."""
    return [
        match.end()
        for match in _BOUNDARY.finditer(text)
        if text[match.start()] != "." or not is_abbreviation_dot(text, match.start())
    ]


def within(text: str, max_sentences: int) -> tuple[str, bool]:
    """(`text` up to the end of its `max_sentences`-th sentence, whether it went past
    it); 0 = no limit."""
    starts = sentence_starts(text) if max_sentences else []
    if len(starts) < max_sentences or not max_sentences:
        return text, False
    return text[: starts[max_sentences - 1]].rstrip(), True


@dataclass(slots=True)
class SentenceLimit:
    """One reply's text as its tokens arrive, against the limit."""

    max_sentences: int  # 0: no limit
    text: str = field(default="", init=False)

    def admit(self, delta: str) -> tuple[str, bool]:
        """(what of `delta` to send, whether the reply ends with it). An empty first
        item with True: the reply ended before this token."""
        kept, over = within(self.text + delta, self.max_sentences)
        sent = kept[len(self.text) :] if over else delta
        self.text += sent
        return sent, over
