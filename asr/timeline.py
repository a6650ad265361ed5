"""Bookkeeping on the 16 kHz sample timeline of one stream: when each sample arrived, and
the recent audio itself."""

from __future__ import annotations

import bisect

import numpy as np

SAMPLE_RATE = 16_000
NS_PER_SAMPLE = 1_000_000_000 / SAMPLE_RATE


class ArrivalClock:
    """Maps a 16 kHz sample index to the perf_counter_ns at which that sample arrived.

    Each input frame is recorded as (position of its end on the 16 kHz timeline, arrival_ns).
    A sample inside a frame arrived at the frame's arrival minus the duration of the samples
    after it. Positions are in input time, so the resampler's output lag does not skew them.
    """

    def __init__(self) -> None:
        self._ends: list[float] = []
        self._arrivals: list[int] = []
        self._input_position = 0.0

    def record(self, input_samples: int, input_rate: int, arrival_ns: int) -> None:
        self._input_position += input_samples * SAMPLE_RATE / input_rate
        self._ends.append(self._input_position)
        self._arrivals.append(arrival_ns)

    def arrival_ns(self, sample: int) -> int:
        """Arrival time of `sample` (its end); clamps to the first/last recorded frame."""
        if not self._ends:
            return 0
        index = bisect.bisect_left(self._ends, float(sample))
        if index == len(self._ends):
            return self._arrivals[-1]
        behind = (self._ends[index] - sample) * NS_PER_SAMPLE
        return self._arrivals[index] - round(behind)

    def forget_before(self, sample: int) -> None:
        """Drop frames that end before `sample`; amortised so each frame costs O(1)."""
        drop = bisect.bisect_left(self._ends, float(sample))
        if drop > 1024:
            del self._ends[:drop]
            del self._arrivals[:drop]


class SampleBuffer:
    """Recent 16 kHz audio addressed by absolute sample index, in one preallocated array."""

    def __init__(self, capacity_samples: int) -> None:
        self._data = np.zeros(capacity_samples, np.float32)
        self._start = 0  # absolute index of _data[0]
        self._size = 0
        self._keep_from = 0  # caller's promise: nothing before this is read again

    @property
    def end(self) -> int:
        """Absolute index one past the newest sample."""
        return self._start + self._size

    def append(self, samples: np.ndarray) -> None:
        if self._size + samples.size > self._data.size:
            self._compact()
        if self._size + samples.size > self._data.size:
            # Only on a caller bug (keep_from never advanced); grow rather than lose audio.
            grown = np.zeros(max(2 * self._data.size, self._size + samples.size), np.float32)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : self._size + samples.size] = samples
        self._size += samples.size

    def keep_from(self, sample: int) -> None:
        self._keep_from = max(self._keep_from, sample)

    def read(self, start: int, end: int) -> np.ndarray:
        """Copy of samples [start, end), clipped to what is held."""
        lo = max(start, self._start) - self._start
        hi = min(end, self.end) - self._start
        return self._data[lo:hi].copy() if hi > lo else np.zeros(0, np.float32)

    def _compact(self) -> None:
        drop = min(max(self._keep_from - self._start, 0), self._size)
        if drop:
            self._data[: self._size - drop] = self._data[drop : self._size]
            self._start += drop
            self._size -= drop
