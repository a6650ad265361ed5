"""The ring's shared segment: its layout, how it is allocated, and what both ends share.

A ring is one `memfd` (a 4 KiB control block, then the records) and two eventfds
(docs/ipc.md; ipc/ring.py has the protocol). This module holds the layout's constants,
the errors, `create_ring`, and `RingEnd`: the mapping, the peer watch and the poll set that
the producer and the consumer both hold. The per-record paths stay in ipc/ring.py.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import struct
from dataclasses import dataclass

CONTROL_BYTES = 4096
MAGIC = 0x56585231  # "VXR1"
_IDENT = struct.Struct("<IIQ")  # magic, version, capacity; offset 0
# Control block words (int64 index = byte offset / 8): the producer's cache line at 64,
# the consumer's at 128. CREDITED: ring position up to which freed bytes went into the
# space fd (a restarted producer's free space is counted from it, not from the tail).
HEAD, PUBLISHED, DROPPED, PRODUCER_BEAT = 8, 9, 10, 11
TAIL, OWED, CONSUMER_BEAT, CREDITED = 16, 17, 18, 19


class PeerDied(ConnectionError):
    """The process on the other side of a channel exited."""


class RingCorrupt(RuntimeError):
    """The ring's contents make no sense: the peer wrote garbage."""


class RingFull(TimeoutError):
    """A blocking send found no room before its timeout."""


@dataclass(frozen=True, slots=True)
class RingFds:
    """The three file descriptors that make a ring; inheritable for `pass_fds`."""

    memory: int
    doorbell: int
    space: int

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.memory, self.doorbell, self.space)

    def close(self) -> None:
        for fd in self.as_tuple():
            os.close(fd)


def create_ring(capacity_bytes: int, name: str = "voxrelay-ring") -> RingFds:
    """Allocate a ring: a sealed-size memfd and two eventfds."""
    if capacity_bytes < 4096 or capacity_bytes & (capacity_bytes - 1):
        raise ValueError(f"ring capacity must be a power of two >= 4096, got {capacity_bytes}")
    memory = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(memory, CONTROL_BYTES + capacity_bytes)
    with mmap.mmap(memory, CONTROL_BYTES) as control:
        _IDENT.pack_into(control, 0, MAGIC, 1, capacity_bytes)
    doorbell = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    space = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    return RingFds(memory, doorbell, space)


def dropped_records(fds: RingFds) -> int:
    """Records the ring's producer dropped because it was full (`block=False` sends),
    read from the shared control block: any process holding the fds can count them."""
    with mmap.mmap(fds.memory, CONTROL_BYTES, prot=mmap.PROT_READ) as control:
        words = memoryview(control).cast("q")
        dropped = words[DROPPED]
        words.release()  # the view pins the map
    return dropped


def drain(fd: int) -> int:
    try:
        return os.eventfd_read(fd)
    except BlockingIOError:
        return 0


class RingEnd:
    """What both ends share: the mapping, the peer watch and the poll set."""

    def __init__(self, fds: RingFds, peer_pid: int | None, wait_fd: int) -> None:
        self.fds = fds
        self._doorbell, self._space = fds.doorbell, fds.space
        size = os.fstat(fds.memory).st_size
        self._map = mmap.mmap(fds.memory, size)
        magic, _version, capacity = _IDENT.unpack_from(self._map, 0)
        if magic != MAGIC or capacity + CONTROL_BYTES != size:
            raise ValueError("file descriptor is not a voxrelay ring")
        self.capacity: int = capacity
        self._mask = capacity - 1
        self.max_record_bytes: int = capacity // 4
        whole = memoryview(self._map)
        self._data = whole[CONTROL_BYTES:]
        # (512,) native int64 over the page-aligned control block: one load or store per field.
        self._words = whole[:CONTROL_BYTES].cast("q")
        whole.release()
        self._peer_fd = os.pidfd_open(peer_pid) if peer_pid is not None else None
        self._poll = select.poll()
        self._poll.register(wait_fd, select.POLLIN)
        if self._peer_fd is not None:
            self._poll.register(self._peer_fd, select.POLLIN)

    def peer_alive(self) -> bool:
        if self._peer_fd is None:
            return True
        return not select.select([self._peer_fd], [], [], 0)[0]

    def _wait(self, timeout_s: float | None) -> bool:
        """Block until our eventfd fires; False on timeout; PeerDied if the peer exits."""
        timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
        events = self._poll.poll(timeout_ms)
        for fd, _ in events:
            if fd == self._peer_fd:
                raise PeerDied("the process at the other end of the ring exited")
        return bool(events)

    def close(self) -> None:
        self._words.release()  # drop the views first: they pin the map
        self._data.release()
        # A caller may still hold a RecordView; then the GC unmaps later.
        with contextlib.suppress(BufferError):
            self._map.close()
        if self._peer_fd is not None:
            os.close(self._peer_fd)
            self._peer_fd = None
