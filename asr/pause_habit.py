"""A speaker's own mid-turn pauses, learned in the session: a listener who has cut
someone off once waits longer for them after that.

The learned end of turn (asr/turn_end.py) reads each pause from the words and the voice
before it. Some pauses it cannot tell from an end: a speaker who finishes a whole
sentence, pauses 0.4-0.9 s, and goes on with the next one ("Hopefully the recording
levels are okay." in the unscripted set: the fused P(end) there is 0.80-0.93, as high as
at the true ends; docs/asr.md, "Session 29"). What does tell is the speaker: when speech
comes back within `max_ms` of a committed turn's speech end, the speaker went on, and
that pause was mid-turn. From then on no pause of the session ends the turn sooner than
that gap plus MARGIN_MS (at most `max_ms`). Each committed turn the speaker let stand
(no speech for KEPT_MS after it: the reply played) halves what is left of it, so a
speaker who paused once is not waited for all session. Measured in docs/asr.md,
"Session 30".
"""

from __future__ import annotations

from dataclasses import dataclass

# Above the gap the speaker went on after: the next such pause is rarely shorter by
# more than a few VAD windows.
MARGIN_MS = 100
# Silence this long after a committed turn's speech end: the speaker let the reply play,
# so that end was right. (Between max_ms and this, the gap says neither: a speaker who
# goes on after 1.2 s may have heard the reply start, or not.)
KEPT_MS = 3000
# What remains of the learned wait after a committed turn the speaker let stand.
DECAY = 0.5


@dataclass(slots=True)
class PauseHabit:
    """The least silence that ends this session's turn, learned from its speaker.

    `max_ms`: a speaker who comes back within it after a committed end went on; the
    learned floor never exceeds it. 0: off (the floor stays 0).
    """

    max_ms: int
    floor_ms: float = 0.0
    went_on: int = 0  # committed ends the speaker went on from, this session

    def speech_after_end(self, gap_ms: float) -> None:
        """Speech started `gap_ms` after the speech end of a committed turn."""
        if not self.max_ms:
            return
        if gap_ms <= self.max_ms:
            self.went_on += 1
            self.floor_ms = max(self.floor_ms, min(gap_ms + MARGIN_MS, self.max_ms))
        elif gap_ms >= KEPT_MS:
            self.floor_ms *= DECAY

    def wait_ms(self, wait_ms: int, fallback_ms: int) -> int:
        """`wait_ms` (the pause's own learned wait), raised to the floor, capped at the
        fallback."""
        return min(max(wait_ms, round(self.floor_ms)), max(wait_ms, fallback_ms))
