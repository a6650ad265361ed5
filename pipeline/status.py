"""A stage's status block: a tiny memfd the supervisor reads without a message.

The stage writes its heartbeat (monotonic ns) every loop iteration and a ready stamp
once its models are loaded; the supervisor reads both to tell loading, busy, stuck
(heartbeat stale: SIGSTOP, a deadlock) and dead (pidfd) apart.

Two processes touch the block at once, so each value is one aligned 8-byte word read
and written whole through an int64 view (one load or store on x86-64 and arm64).
`struct.pack_into`/`unpack_from` copy byte by byte: a read racing a write could mix
old and new bytes, and at a carry into a high byte the mix is a value ~2^40 ns
(18 min) old. The 500-turn soak once killed a live stage for a heartbeat "874 s" old,
which is what such a read gives (the beat then falls back to the ready stamp, 874 s
earlier); the supervisor also wants a stale beat twice in a row now (supervisor.py).
"""

from __future__ import annotations

import mmap
import os
import time

import numpy as np

STATUS_BYTES = 64
_HEARTBEAT, _READY = 0, 1  # int64 slots


class StageStatus:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, STATUS_BYTES)
        # Page-aligned mapping, so every int64 slot is 8-byte aligned.
        self._words = np.frombuffer(self._map, dtype=np.int64, count=2)

    @classmethod
    def create(cls, name: str) -> StageStatus:
        fd = os.memfd_create(f"voxrelay-status-{name}", os.MFD_CLOEXEC)
        os.ftruncate(fd, STATUS_BYTES)
        os.set_inheritable(fd, True)
        return cls(fd)

    @classmethod
    def attach(cls, fd: int) -> StageStatus:
        return cls(fd)

    def beat(self) -> None:
        self._words[_HEARTBEAT] = time.perf_counter_ns()

    def mark_ready(self, now_ns: int) -> None:
        self._words[_READY] = now_ns

    def reset(self) -> None:
        self._words[_HEARTBEAT] = 0
        self._words[_READY] = 0

    @property
    def heartbeat_ns(self) -> int:
        return int(self._words[_HEARTBEAT])

    @property
    def ready_ns(self) -> int:
        return int(self._words[_READY])

    def close(self) -> None:
        del self._words  # the view pins the map: release it first
        self._map.close()
        os.close(self.fd)
