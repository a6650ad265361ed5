"""Single-producer single-consumer byte ring in shared memory.

Memory: one `memfd` mapped by both processes and handed to children with `pass_fds`,
so nothing is left in /dev/shm when a process crashes. Layout::

    [0, 4096)           control block: producer and consumer fields on their own
                        cache lines (no false sharing)
    [4096, 4096 + cap)  records, 8-byte aligned; a PAD record fills up to the wrap
                        point so a record is always contiguous (a memoryview works)

Signalling uses two eventfds instead of reading the peer's index from shared memory:
the producer adds 1 to the *doorbell* per record published and the consumer consumes
exactly the count it read; the consumer adds the bytes it freed to the *space* fd and
the producer credits exactly that. The syscalls order the memory accesses, so this is
correct on weakly ordered CPUs (ARM) without explicit fences. Head, tail and the
records owed are mirrored in the control block only so a restarted stage can resume
its side of a live ring. Each of those fields is one aligned 8-byte word, read and
written whole through an int64 view: `struct` copies byte by byte, and a read racing
a write could see a mix of old and new bytes (tests/pipeline/test_status.py shows it).

The peer's pidfd sits in every poll set: a dead peer is seen within milliseconds.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import struct
import time
from dataclasses import dataclass

import numpy as np

from voxrelay.ipc.records import ALIGN, HEADER, HEADER_BYTES, Record, RecordKind, padded

CONTROL_BYTES = 4096
MAGIC = 0x56585231  # "VXR1"
_IDENT = struct.Struct("<IIQ")  # magic, version, capacity; offset 0
# Control block words (int64 index = byte offset / 8): the producer's cache line at 64,
# the consumer's at 128.
_HEAD, _PUBLISHED, _DROPPED, _PRODUCER_BEAT = 8, 9, 10, 11
_TAIL, _OWED, _CONSUMER_BEAT = 16, 17, 18
_CLOSED = np.zeros(0, dtype=np.int64)
_PAD_HEADER = struct.Struct("<IH")
_KINDS = frozenset(int(k) for k in RecordKind)


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
        words = np.frombuffer(control, dtype=np.int64, count=CONTROL_BYTES // 8)
        dropped = int(words[_DROPPED])
        del words  # the view pins the map
    return dropped


def _drain(fd: int) -> int:
    try:
        return os.eventfd_read(fd)
    except BlockingIOError:
        return 0


class _End:
    """What both ends share: the mapping, the peer watch and the poll set."""

    def __init__(self, fds: RingFds, peer_pid: int | None, wait_fd: int) -> None:
        self.fds = fds
        size = os.fstat(fds.memory).st_size
        self._map = mmap.mmap(fds.memory, size)
        magic, _version, capacity = _IDENT.unpack_from(self._map, 0)
        if magic != MAGIC or capacity + CONTROL_BYTES != size:
            raise ValueError("file descriptor is not a voxrelay ring")
        self.capacity = capacity
        self.max_record_bytes = capacity // 4
        self._data = memoryview(self._map)[CONTROL_BYTES:]
        # (512,) int64 over the page-aligned control block: one load or store per field.
        self._words = np.frombuffer(self._map, dtype=np.int64, count=CONTROL_BYTES // 8)
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
        if self._peer_fd is not None and any(fd == self._peer_fd for fd, _ in events):
            raise PeerDied("the process at the other end of the ring exited")
        return bool(events)

    def close(self) -> None:
        self._words = _CLOSED  # drop the view first: it pins the map
        self._data.release()
        # A caller may still hold a RecordView; then the GC unmaps later.
        with contextlib.suppress(BufferError):
            self._map.close()
        if self._peer_fd is not None:
            os.close(self._peer_fd)
            self._peer_fd = None


class Producer(_End):
    """The writing end. Audio uses `block=False` (drop and count when full)."""

    def __init__(self, fds: RingFds, peer_pid: int | None = None) -> None:
        super().__init__(fds, peer_pid, fds.space)
        words = self._words
        head, published, dropped = (int(words[i]) for i in (_HEAD, _PUBLISHED, _DROPPED))
        tail = int(words[_TAIL])
        # A restarted producer resumes a live ring: credit what the consumer freed so far.
        # The drain comes after reading the tail so a concurrent free can only be
        # under-counted (a few bytes lost to this ring), never counted twice.
        _drain(fds.space)
        self._head: int = head
        self._published: int = published
        self._dropped: int = dropped
        self._free = self.capacity - (head - tail)

    @property
    def dropped(self) -> int:
        return self._dropped

    def unread_bytes(self) -> int:
        """Bytes sent that the consumer has not read yet (its position, read live)."""
        return self._head - int(self._words[_TAIL])

    def fileno(self) -> int:
        return self.fds.space

    def beat(self, now_ns: int | None = None) -> None:
        self._words[_PRODUCER_BEAT] = now_ns or time.perf_counter_ns()

    def _reserve(self, need: int, block: bool, timeout_s: float) -> bool:
        if self._free >= need:  # the common case costs no syscall
            return True
        self._free += _drain(self.fds.space)
        if self._free >= need:
            return True
        if not block:
            return False
        deadline = time.monotonic() + timeout_s
        while self._free < need:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._wait(remaining):
                if self._free + _drain(self.fds.space) >= need:
                    break
                raise RingFull(f"ring stayed full for {timeout_s:.3f} s ({need} bytes wanted)")
            self._free += _drain(self.fds.space)
        self._free += _drain(self.fds.space)
        return True

    def send(
        self,
        kind: RecordKind,
        *parts: bytes | memoryview,
        session_id: int = 0,
        turn_id: int = 0,
        stamp_ns: int | None = None,
        origin_ns: int = 0,
        flags: int = 0,
        block: bool = True,
        timeout_s: float = 1.0,
    ) -> bool:
        """Publish one record; False if dropped (only with block=False)."""
        length = HEADER_BYTES + sum(len(p) for p in parts)
        need = padded(length)
        if need > self.max_record_bytes:
            raise ValueError(
                f"record of {length} bytes exceeds this ring's limit of {self.max_record_bytes}"
            )
        position = self._head % self.capacity
        to_end = self.capacity - position
        total = need if need <= to_end else to_end + need
        if not self._reserve(total, block, timeout_s):
            self._dropped += 1
            self._words[_DROPPED] = self._dropped
            return False
        if need > to_end:
            _PAD_HEADER.pack_into(self._data, position, to_end, RecordKind.PAD)
            self._head += to_end
            position = 0
        stamp = time.perf_counter_ns() if stamp_ns is None else stamp_ns
        HEADER.pack_into(
            self._data, position, length, kind, flags, session_id, turn_id, stamp, origin_ns
        )
        cursor = position + HEADER_BYTES
        for part in parts:
            self._data[cursor : cursor + len(part)] = part
            cursor += len(part)
        self._head += need
        self._free -= total
        self._published += 1
        words = self._words
        words[_HEAD] = self._head
        words[_PUBLISHED] = self._published
        words[_PRODUCER_BEAT] = stamp
        os.eventfd_write(self.fds.doorbell, 1)
        return True


class RecordView:
    """A record read in place; valid until the consumer's `advance()`."""

    __slots__ = ("kind", "flags", "session_id", "turn_id", "stamp_ns", "origin_ns", "payload")

    def __init__(self, header: tuple[int, ...], payload: memoryview) -> None:
        _, kind, self.flags, self.session_id, self.turn_id, self.stamp_ns, self.origin_ns = header
        self.kind = RecordKind(kind)
        self.payload = payload


class Consumer(_End):
    """The reading end."""

    def __init__(self, fds: RingFds, peer_pid: int | None = None) -> None:
        super().__init__(fds, peer_pid, fds.doorbell)
        self._tail = int(self._words[_TAIL])
        self._owed = int(self._words[_OWED])
        self._current: int = 0  # padded size of the record under peek, 0 if none

    def fileno(self) -> int:
        return self.fds.doorbell

    def beat(self, now_ns: int | None = None) -> None:
        self._words[_CONSUMER_BEAT] = now_ns or time.perf_counter_ns()

    def pending(self) -> int:
        """Records published and not yet consumed, as far as the doorbell has told us."""
        if self._owed:  # read the doorbell only once the known records are consumed
            return self._owed
        fresh = _drain(self.fds.doorbell)
        if fresh:
            self._owed += fresh
            self._words[_OWED] = self._owed
        return self._owed

    def wait(self, timeout_s: float | None) -> bool:
        """Wait until a record is pending; False on timeout."""
        if self.pending():
            return True
        return self._wait(timeout_s) and self.pending() > 0

    def peek(self) -> RecordView | None:
        """The next record, read in place, or None if none is pending."""
        assert self._current == 0, "advance() the previous record first"
        if not self.pending():
            return None
        freed = 0
        position = self._tail % self.capacity
        if position % ALIGN:
            raise RingCorrupt(f"ring read position {position} is not {ALIGN}-byte aligned")
        length, kind = _PAD_HEADER.unpack_from(self._data, position)
        if kind == RecordKind.PAD:
            # The producer pads exactly to the end of the ring, and never twice running.
            if length != self.capacity - position:
                raise RingCorrupt(f"corrupt ring padding of {length} bytes at offset {position}")
            freed = length
            self._tail += length
            position = 0
            length, kind = _PAD_HEADER.unpack_from(self._data, position)
            if kind == RecordKind.PAD:
                raise RingCorrupt("corrupt ring: padding follows padding")
        if freed:
            os.eventfd_write(self.fds.space, freed)
        if not HEADER_BYTES <= length <= min(self.max_record_bytes, self.capacity - position):
            raise RingCorrupt(f"corrupt ring record length {length} at offset {position}")
        header = HEADER.unpack_from(self._data, position)
        self._current = padded(length)
        if kind not in _KINDS:
            self.advance()
            raise ValueError(f"skipped a record of unknown kind {kind}")
        return RecordView(header, self._data[position + HEADER_BYTES : position + length])

    def resync(self) -> None:
        """Skip whatever the producer published, after that producer died leaving garbage
        (RingCorrupt): the next producer on this ring starts from an empty ring."""
        head = int(self._words[_HEAD])
        _drain(self.fds.doorbell)
        self._tail, self._owed, self._current = head, 0, 0
        self._mirror()

    def advance(self) -> None:
        """Release the record returned by `peek()` so the producer may reuse its bytes."""
        assert self._current, "nothing to advance past"
        size, self._current = self._current, 0
        self._tail += size
        self._owed -= 1
        self._mirror()
        os.eventfd_write(self.fds.space, size)

    def _mirror(self) -> None:
        words = self._words
        words[_TAIL] = self._tail
        words[_OWED] = self._owed
        words[_CONSUMER_BEAT] = time.perf_counter_ns()

    def recv(self) -> Record | None:
        """The next record with its payload copied out, or None."""
        view = self.peek()
        if view is None:
            return None
        record = Record(
            view.kind,
            view.flags,
            view.session_id,
            view.turn_id,
            view.stamp_ns,
            view.origin_ns,
            bytes(view.payload),
        )
        view.payload.release()
        self.advance()
        return record
