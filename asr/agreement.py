"""LocalAgreement-2 over successive re-decodes of a growing utterance.

Each decode re-transcribes the whole utterance so far. A word becomes stable once two
consecutive decodes agree on it and on every word before it; stable words are never
retracted, so downstream (the LLM prefix cache) can build on them.
"""

from __future__ import annotations

import re

_NON_WORD = re.compile(r"[^\w']+")
# Words of the stable tail used to find it again in a decode that shifted it.
ALIGN_WORDS = 2


def _key(word: str) -> str:
    # Case and punctuation change between decodes ("meters" vs "meters."); the word does not.
    return _NON_WORD.sub("", word.lower())


class LocalAgreement:
    def __init__(self) -> None:
        self.stable: list[str] = []
        self.unstable: list[str] = []

    def update(self, text: str) -> bool:
        """Add a decode; return whether the (stable, unstable) split changed."""
        words = text.split()
        before = (len(self.stable), self.unstable)
        # Compare only what lies past the stable prefix, each decode aligned on its own
        # copy of that prefix, so a word one decode adds or drops early does not shift
        # every later word out of agreement.
        tail = words[self._stable_end(words) :]
        agreed = 0
        for old, new in zip(self.unstable, tail, strict=False):
            if _key(old) != _key(new):
                break
            agreed += 1
        self.stable = self.stable + tail[:agreed]
        self.unstable = tail[agreed:]
        return before != (len(self.stable), self.unstable)

    def _stable_end(self, words: list[str]) -> int:
        """Index in `words` just past the stable prefix, even if this decode dropped or
        added a word before it (Whisper often loses a leading "And"): align on the last
        stable words so the unstable tail neither repeats nor skips words."""
        if not self.stable or self._extends_stable(words):
            return min(len(self.stable), len(words))
        anchor = [_key(w) for w in self.stable[-ALIGN_WORDS:]]
        keys = [_key(w) for w in words]
        ends = [
            end
            for end in range(len(anchor), len(keys) + 1)
            if keys[end - len(anchor) : end] == anchor
        ]
        if not ends:
            return min(len(self.stable), len(words))
        return min(ends, key=lambda end: abs(end - len(self.stable)))

    def _extends_stable(self, words: list[str]) -> bool:
        stable_keys = [_key(w) for w in self.stable]
        return [_key(w) for w in words[: len(self.stable)]] == stable_keys

    def agree_with(self, text: str) -> int | None:
        """Make the stable prefix agree with `text` (a later, better decode): returns the
        number of stable words kept when some had to go (a rollback), else None."""
        keys = [_key(w) for w in text.split()]
        kept = 0
        for word, key in zip(self.stable, keys, strict=False):
            if _key(word) != key:
                break
            kept += 1
        if kept == len(self.stable):
            return None
        self.unstable = text.split()[kept:]
        self.stable = self.stable[:kept]
        return kept

    @property
    def stable_text(self) -> str:
        return " ".join(self.stable)

    @property
    def unstable_text(self) -> str:
        return " ".join(self.unstable)
