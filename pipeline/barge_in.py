"""When the user's speech over a reply cuts it: the barge-in rule of one session.

The ASR's speech start already needs `min_speech_ms` of voiced audio, which keeps
clicks and most coughs out. `min_words > 0` also waits for the ASR to hear that many
words (a partial, or the final transcript at the latest), so a cough or a short "mhm"
does not cut the reply; the price is up to one partial interval of extra delay.
"""

from __future__ import annotations

from dataclasses import dataclass


def count_words(text: str) -> int:
    # Whisper writes a cough as "(coughs)" or "*cough*": bracketed or starred, not words.
    return sum(
        1
        for token in text.split()
        if any(ch.isalnum() for ch in token) and token[0] not in "([*" and token[-1] not in ")]*"
    )


@dataclass(slots=True)
class BargeInRule:
    """Decides, per session, whether the user's turn cuts the reply now.

    The caller checks that a reply is still pending or playing; this only says whether
    what the user has said so far counts as an interruption.
    """

    min_words: int = 0
    pending_turn: int | None = None  # spoke over a reply; not enough words yet

    def __post_init__(self) -> None:
        if not 0 <= self.min_words <= 20:
            raise ValueError(f"barge_in_min_words must be in 0..20 (0 = off), got {self.min_words}")

    def speech_started(self, turn_id: int) -> bool:
        if self.min_words == 0:
            return True
        self.pending_turn = turn_id
        return False

    def heard(self, turn_id: int, text: str, final: bool) -> bool:
        """A partial (or the final) transcript of `turn_id`; True: cut the reply now."""
        if self.pending_turn is None or turn_id != self.pending_turn:
            return False
        if count_words(text) >= self.min_words:
            self.pending_turn = None
            return True
        if final:  # the whole utterance was too short: it does not interrupt
            self.pending_turn = None
        return False
