"""The sink side of speculative replies: nothing of a turn is heard before its commit.

The LLM starts a reply at the ASR's SPECULATIVE_END, before the transcript is final, so
TTS may already be producing its audio. A session holds that turn's audio records and
live reply text here until COMMIT (the transcript is final and the reply stands), and
drops them at RESUME (the user spoke on, or the final transcript differs). Both records
travel the same path as the audio (LLM -> TTS -> supervisor), so order is kept.
"""

from __future__ import annotations

from collections.abc import Callable

Release = Callable[[], None]


class CommitGate:
    def __init__(self) -> None:
        self._committed: set[int] = set()
        self._held: dict[int, list[Release]] = {}

    def admits(self, turn_id: int) -> bool:
        return turn_id in self._committed

    def hold(self, turn_id: int, release: Release) -> None:
        """Keep `release` (delivers one held item) until the turn commits or retracts."""
        self._held.setdefault(turn_id, []).append(release)

    def commit(self, turn_id: int) -> list[Release]:
        """The turn's reply stands: what was held, in arrival order, to deliver now."""
        self._committed.add(turn_id)
        return self._held.pop(turn_id, [])

    def retract(self, turn_id: int) -> int:
        """The speculative reply is void: drop what it sent; returns how many items."""
        return len(self._held.pop(turn_id, []))

    def forget(self, turn_id: int) -> None:
        self._committed.discard(turn_id)
        self._held.pop(turn_id, None)

    def forget_before(self, turn_id: int) -> None:
        for turn in [t for t in (*self._committed, *self._held) if t < turn_id]:
            self.forget(turn)

    def held(self, turn_id: int) -> int:
        return len(self._held.get(turn_id, ()))
