"""How much of the ASR process's time partial decodes may take, across all its streams.

Each stream already spaces its own partials (at least twice its last decode time
apart), but one ASR process serves every session: with four people speaking at once,
four streams each using half the CPU would queue every end-of-turn decode behind other
sessions' partials and starve the LLM and TTS of the cores. Partials are a nicety
(they let the LLM prefill early); the decode at the end of a turn is on the TTFA path
and is never held back by this budget.
"""

from __future__ import annotations

import time
from collections import deque


class DecodeBudget:
    def __init__(self, share: float, window_s: float = 2.0) -> None:
        assert 0 < share <= 1 and window_s > 0
        self._allowed_ns = int(share * window_s * 1e9)
        self._window_ns = int(window_s * 1e9)
        self._decodes: deque[tuple[int, int]] = deque()  # (start_ns, end_ns), oldest first

    def record(self, start_ns: int, end_ns: int) -> None:
        """One decode (partial or final) ran from start_ns to end_ns."""
        self._decodes.append((start_ns, end_ns))

    def allows_partial(self, now_ns: int | None = None) -> bool:
        """True while decodes took less than the share of the last window."""
        now_ns = time.perf_counter_ns() if now_ns is None else now_ns
        since = now_ns - self._window_ns
        while self._decodes and self._decodes[0][1] <= since:
            self._decodes.popleft()
        busy = sum(end - max(start, since) for start, end in self._decodes)
        return busy < self._allowed_ns
