"""A stage's status block: a tiny memfd the supervisor reads without a message.

The stage writes its heartbeat (monotonic ns) every loop iteration and a ready stamp
once its models are loaded; the supervisor reads both to tell loading, busy, stuck
(heartbeat stale: SIGSTOP, a deadlock) and dead (pidfd) apart.
"""

from __future__ import annotations

import mmap
import os
import struct
import time

_LAYOUT = struct.Struct("<qq")  # heartbeat_ns, ready_ns
STATUS_BYTES = 64


class StageStatus:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, STATUS_BYTES)

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
        struct.pack_into("<q", self._map, 0, time.perf_counter_ns())

    def mark_ready(self, now_ns: int) -> None:
        struct.pack_into("<q", self._map, 8, now_ns)

    def reset(self) -> None:
        _LAYOUT.pack_into(self._map, 0, 0, 0)

    @property
    def heartbeat_ns(self) -> int:
        return int(_LAYOUT.unpack_from(self._map, 0)[0])

    @property
    def ready_ns(self) -> int:
        return int(_LAYOUT.unpack_from(self._map, 0)[1])

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)
