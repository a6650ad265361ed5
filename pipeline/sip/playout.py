"""Outgoing audio at real-time pace: 20 ms frames on a monotonic clock.

Both media ports (RTP and AudioSocket) send through a `Pacer`. Reply audio is queued
as 8 kHz PCM16; a task wakes every 20 ms against deadlines computed from its start
(never from the last wake-up, so delays cannot accumulate), and sends one frame when
one is queued. Between replies nothing is sent (silence suppression: the first frame
of each burst is flagged so RTP can set the marker bit). Barge-in empties the queue;
speech that may be one pauses it (so does a hold).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("voxrelay.sip")

SAMPLE_RATE = 8000
FRAME_MS = 20
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000  # 160
FRAME_BYTES = FRAME_SAMPLES * 2  # PCM16
FRAME_NS = FRAME_MS * 1_000_000
MAX_LATE_FRAMES = 5  # a loop stalled longer than this resynchronises instead of bursting

# (frame PCM16, index of the 20 ms tick since start, first frame of a burst)
SendFrame = Callable[[bytes, int, bool], None]


class Pacer:
    def __init__(self, send_frame: SendFrame, max_queued_s: float = 120.0) -> None:
        self._send_frame = send_frame
        self._queue = bytearray()
        self._max_queued_bytes = int(max_queued_s * SAMPLE_RATE) * 2
        self._flush = False  # the reply is complete: pad and send its last partial frame
        self._bursting = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pauses: set[str] = set()  # why the queue is kept and nothing sent
        self.dropped_bytes = 0
        self.frames_sent = 0
        self.first_frame_ns = 0  # of the current burst
        self.on_drained: Callable[[], None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._queue.clear()

    def play(self, pcm16: bytes) -> None:
        if len(self._queue) + len(pcm16) > self._max_queued_bytes:
            self.dropped_bytes += len(pcm16)
            return
        self._queue += pcm16
        self._flush = False
        self._wake.set()

    @property
    def paused(self) -> bool:
        return bool(self._pauses)

    def set_paused(self, paused: bool, reason: str = "hold") -> None:
        """A pause keeps the queue and sends nothing; once no reason is left ("hold":
        the call is on hold; "barge_in": the caller may be cutting the reply), what is
        queued goes on."""
        if paused:
            self._pauses.add(reason)
        else:
            self._pauses.discard(reason)
        self._wake.set()

    def flush(self) -> None:
        self._flush = True
        self._wake.set()

    def clear(self) -> None:
        """Barge-in: drop everything not yet sent (a barge-in pause ends with it)."""
        self.dropped_bytes += len(self._queue)
        self._queue.clear()
        self._flush = False
        self.set_paused(False, "barge_in")

    @property
    def queued_ms(self) -> float:
        return len(self._queue) / 2 / SAMPLE_RATE * 1000

    def _has_frame(self) -> bool:
        return len(self._queue) >= FRAME_BYTES or (self._flush and bool(self._queue))

    async def _run(self) -> None:
        origin_ns = time.perf_counter_ns()
        next_tick = 0  # 20 ms ticks since origin: RTP timestamps follow them
        burst_start_ns, burst_tick, frames_in_burst = origin_ns, 0, 0
        while True:
            if not self._has_frame() or self.paused:
                if self._bursting and self.on_drained is not None and not self._queue:
                    self.on_drained()
                self._bursting = False
                self._wake.clear()
                await self._wake.wait()
                continue
            now = time.perf_counter_ns()
            due = burst_start_ns + frames_in_burst * FRAME_NS
            if not self._bursting or now - due > MAX_LATE_FRAMES * FRAME_NS:
                # A new burst (or a stalled loop): its grid starts now, so the first frame
                # leaves at once and the next ones exactly 20 ms apart.
                burst_start_ns, frames_in_burst, due = now, 0, now
                burst_tick = max(next_tick, (now - origin_ns) // FRAME_NS)
            elif due > now:
                await asyncio.sleep((due - now) / 1e9)
                if self.paused or not self._has_frame():
                    continue  # cleared or held while we slept
            frame = bytes(self._queue[:FRAME_BYTES]).ljust(FRAME_BYTES, b"\0")
            del self._queue[:FRAME_BYTES]
            first = not self._bursting
            if first:
                self.first_frame_ns = time.perf_counter_ns()
            next_tick = burst_tick + frames_in_burst + 1
            self._send_frame(frame, burst_tick + frames_in_burst, first)
            self._bursting = True
            self.frames_sent += 1
            frames_in_burst += 1


def raise_thread_priority(nice: int) -> bool:
    """Give the calling thread (the event loop that paces RTP and writes the caller's
    audio to the ASR ring) priority over the stage processes. On 2 busy cores, waking the
    ASR otherwise hands it our CPU mid-tick and 20 ms frames leave up to ~10 ms late.
    Linux nice values are per thread; lowering one needs CAP_SYS_NICE, so without it the
    bridge runs as it is and says so. Returns whether the priority was raised."""
    thread_id = threading.get_native_id()
    if os.getpriority(os.PRIO_PROCESS, thread_id) <= nice:
        return True
    try:
        os.setpriority(os.PRIO_PROCESS, thread_id, nice)
    except PermissionError:
        log.warning("cannot raise the media thread's priority to nice %d (needs CAP_SYS_NICE); "
                    "RTP pacing may jitter while the stages are busy", nice)  # fmt: skip
        return False
    return True


class PacedPort:
    """The playout half of a media port (`pipeline.sip.bridge.MediaPort`): everything
    goes through the port's `pacer`, which sends one frame per 20 ms tick."""

    pacer: Pacer

    def play(self, pcm16: bytes) -> None:
        self.pacer.play(pcm16)

    def flush(self) -> None:
        self.pacer.flush()

    def clear(self) -> None:
        self.pacer.clear()

    def pause(self, paused: bool) -> None:
        self.pacer.set_paused(paused, "barge_in")
