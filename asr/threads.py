"""Keeps the model runtimes' compute threads of one decode on different CPUs.

A decode runs on two thread pools: CTranslate2's encoder (its own thread and an OpenMP
worker) and PyTorch's text decoder (the calling thread and an OpenMP worker). After an
idle spell, which is what precedes every end-of-turn decode, Linux here left the two
encoder threads on one vCPU for the first ~50 ms of work, each waiting for the other
(measured with /proc's schedstat: 6-26 ms of run-queue wait per thread per call, 0 back
to back). So at the start of each decode the pool threads are pinned round the CPUs,
starting from the one the calling thread is on: no two threads of a pool share a CPU,
and PyTorch's worker is never on the caller's. Which threads those are is learned on the
first decode: the native threads, other than this process's Python threads, that ran
during each part. Measured in docs/asr.md ("The encoder after an idle spell").
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)
_TASKS = "/proc/self/task"


def _run_ns(tid: int) -> int:
    """Nanoseconds thread `tid` has spent on a CPU (0 once it is gone)."""
    try:
        with open(f"{_TASKS}/{tid}/schedstat") as stat:
            return int(stat.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def _threads() -> dict[int, int]:
    return {int(tid): _run_ns(int(tid)) for tid in os.listdir(_TASKS)}


class ThreadPlacement:
    """One per process (`PLACEMENT`); a no-op where /proc or sched_getcpu is missing."""

    def __init__(self) -> None:
        self._pools: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        try:
            self._getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
            self.enabled = os.path.isdir(_TASKS)
        except (OSError, AttributeError):
            self.enabled = False

    def observe(self, pool: str, work: Callable[[], T]) -> T:
        """Run `work`; the first time for this pool, note the threads that ran in it."""
        if not self.enabled or pool in self._pools:
            return work()
        before = _threads()
        result = work()
        ours = {thread.native_id for thread in threading.enumerate()}
        ran = [
            tid
            for tid, run_ns in sorted(_threads().items())
            if tid not in ours and run_ns > before.get(tid, 0)
        ]
        if ran:  # else nothing ran beside the caller: look again next time
            with self._lock:
                self._pools[pool] = ran
            logger.debug("thread pool %s: %s", pool, ran)
        return result

    @property
    def pools(self) -> dict[str, list[int]]:
        """The threads learned per pool (thread ids), a copy."""
        with self._lock:
            return {name: list(threads) for name, threads in self._pools.items()}

    def spread(self) -> None:
        """Pin each known pool's threads round the CPUs, from the one after the caller's."""
        if not self.enabled or not self._pools:
            return
        cpus = sorted(os.sched_getaffinity(0))
        here = self._getcpu()
        start = cpus.index(here) + 1 if here in cpus else 0
        order = cpus[start:] + cpus[:start]  # the caller's CPU last
        # A thread can be in two pools (an OpenMP worker both Whisper models' encoders
        # use, "auto"): it keeps the CPU its first pool gave it, and each later pool's
        # other threads go round the CPUs it does not take.
        placed: dict[int, int] = {}
        for threads in self._pools.values():
            taken = {placed[tid] for tid in threads if tid in placed}
            free = [cpu for cpu in order if cpu not in taken] or order
            for index, tid in enumerate([tid for tid in threads if tid not in placed]):
                cpu = free[index % len(free)]
                try:
                    os.sched_setaffinity(tid, {cpu})
                except (ProcessLookupError, PermissionError, OSError):
                    threads.remove(tid)  # gone: the runtime ended or replaced it
                    break
                placed[tid] = cpu


PLACEMENT = ThreadPlacement()
