"""The sink side of speculative replies: nothing of a turn is heard before its commit.

The LLM starts a reply at the ASR's SPECULATIVE_END, before the transcript is final, so
TTS may already be producing its audio. A session holds that turn's audio records and
live reply text here until COMMIT (the transcript is final and the reply stands), and
drops them at RESUME (the user spoke on, or the final transcript differs). RESUME travels
the same path as the audio (LLM -> TTS -> supervisor), so every audio record of the
attempt it drops is here before it. COMMIT takes that path too after a retraction, and
otherwise the LLM's events ring straight here (llm/worker.py). Stamps and live text come
on the events rings, so the next attempt's can come before an earlier attempt's RESUME:
`Retraction` tells them apart by when they were made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from voxrelay.ipc.records import Stamp

Release = Callable[[], None]


class CommitGate:
    def __init__(self) -> None:
        self._committed: set[int] = set()
        self._held: dict[int, list[tuple[int, Release]]] = {}  # (made at ns, release)

    def admits(self, turn_id: int) -> bool:
        return turn_id in self._committed

    def hold(self, turn_id: int, release: Release, made_ns: int = 0) -> None:
        """Keep `release` (delivers one held item) until the turn commits or retracts.
        `made_ns`: when the item was made, for an item that may overtake the RESUME
        of an earlier attempt (see `retract`); 0 for the data path's, which cannot."""
        self._held.setdefault(turn_id, []).append((made_ns, release))

    def commit(self, turn_id: int) -> list[Release]:
        """The turn's reply stands: what was held, in arrival order, to deliver now."""
        self._committed.add(turn_id)
        return [release for _, release in self._held.pop(turn_id, [])]

    def retract(self, turn_id: int, retracted_ns: int | None = None) -> int:
        """The speculative reply is void: drop what it sent; returns how many items.

        With `retracted_ns`, items made after it are the next attempt's (they came on
        a faster path than the RESUME) and stay held."""
        held = self._held.pop(turn_id, [])
        kept = [item for item in held if retracted_ns is not None and item[0] > retracted_ns]
        if kept:
            self._held[turn_id] = kept
        return len(held) - len(kept)

    def forget(self, turn_id: int) -> None:
        self._committed.discard(turn_id)
        self._held.pop(turn_id, None)

    def forget_before(self, turn_id: int) -> None:
        for turn in [t for t in (*self._committed, *self._held) if t < turn_id]:
            self.forget(turn)

    def held(self, turn_id: int) -> int:
        return len(self._held.get(turn_id, ()))


# Stamped by the TTS for one attempt at a reply. Stamps travel on another ring than the
# audio, so one of a retracted attempt can arrive after the RESUME that dropped it, and
# one of the next attempt before it; a retracted attempt's were stamped before the TTS
# passed that RESUME on (one thread does both), and the successor's after.
_TTS_ATTEMPT_STAMPS = frozenset({Stamp.FRAGMENT, Stamp.TTS_FIRST_AUDIO})
# The same for the LLM's (and the ASR's SpeculativeEnd, which started the attempt): the
# RESUME carries the moment the LLM retracted the attempt as its origin stamp.
_LLM_ATTEMPT_STAMPS = frozenset(
    {
        Stamp.SPECULATIVE_END,
        Stamp.LLM_START,
        Stamp.LLM_FIRST_TOKEN,
        Stamp.LLM_PREFILL,
        Stamp.REPLY_DELTA,
    }
)


@dataclass(frozen=True, slots=True)
class Retraction:
    """A RESUME as the session saw it: which stamps belong to the attempt it dropped."""

    llm_ns: int  # the LLM retracted the attempt (the RESUME's origin stamp)
    tts_ns: int  # the RESUME left the TTS

    def covers(self, stamp: Stamp, stamped_ns: int) -> bool:
        """Whether a stamp made at `stamped_ns` belongs to the retracted attempt."""
        if stamp in _TTS_ATTEMPT_STAMPS:
            return stamped_ns <= self.tts_ns
        return stamp in _LLM_ATTEMPT_STAMPS and stamped_ns <= self.llm_ns
