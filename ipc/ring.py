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
correct on weakly ordered CPUs (ARM) without explicit fences. Freed bytes go back in
batches: when the consumer finds the ring empty, or once a sixteenth of the ring is
owed, so a stream of records costs one syscall each, not two (docs/ipc.md, "Where the
time goes").

Head, tail, the records owed and the bytes credited are mirrored in the control block
only so a restarted stage can resume its side of a live ring. Each is one aligned
8-byte word, read and written whole through a native-order int64 memoryview (one
load or store in C): `struct`'s little-endian formats copy byte by byte, and a read
racing a write could see a mix of old and new bytes (tests/ipc/test_ring_signals.py
checks the ring's words, tests/pipeline/test_status.py the status block's).

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

from voxrelay.ipc.records import ALIGN, HEADER, HEADER_BYTES, Record, RecordKind

CONTROL_BYTES = 4096
MAGIC = 0x56585231  # "VXR1"
_IDENT = struct.Struct("<IIQ")  # magic, version, capacity; offset 0
# Control block words (int64 index = byte offset / 8): the producer's cache line at 64,
# the consumer's at 128. CREDITED: ring position up to which freed bytes went into the
# space fd (a restarted producer's free space is counted from it, not from the tail).
_HEAD, _PUBLISHED, _DROPPED, _PRODUCER_BEAT = 8, 9, 10, 11
_TAIL, _OWED, _CONSUMER_BEAT, _CREDITED = 16, 17, 18, 19
_PAD_HEADER = struct.Struct("<IH")
_KIND_OF = {int(k): k for k in RecordKind}  # a dict lookup, not the enum's slow call
_ALIGN_MASK = ALIGN - 1
# Bound once: the hot paths below run per record (docs/ipc.md, "Where the time goes").
_pack_header = HEADER.pack_into
_unpack_header = HEADER.unpack_from
_pack_pad = _PAD_HEADER.pack_into
_unpack_pad = _PAD_HEADER.unpack_from
_eventfd_write = os.eventfd_write
_clock = time.perf_counter_ns
# `recv` fills a Record's slots directly: the frozen dataclass's __init__ (an
# object.__setattr__ per field) costs 1.3 us warm and ~12 us with cold caches, the
# slots' own setters 0.8 and ~5 (docs/ipc.md, "Where the time goes").
_RECORD_SLOTS = ("kind", "flags", "session_id", "turn_id", "stamp_ns", "origin_ns", "payload")
assert Record.__slots__ == _RECORD_SLOTS, "ipc/ring.py fills Record's fields in this order"
_new_record = object.__new__
_SET_KIND, _SET_FLAGS, _SET_SESSION, _SET_TURN, _SET_STAMP, _SET_ORIGIN, _SET_PAYLOAD = (
    Record.__dict__[name].__set__ for name in _RECORD_SLOTS
)


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
        dropped = words[_DROPPED]
        words.release()  # the view pins the map
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


class Producer(_End):
    """The writing end. Audio uses `block=False` (drop and count when full)."""

    def __init__(self, fds: RingFds, peer_pid: int | None = None) -> None:
        super().__init__(fds, peer_pid, fds.space)
        words = self._words
        self._head: int = words[_HEAD]
        self._published: int = words[_PUBLISHED]
        self._dropped: int = words[_DROPPED]
        credited = words[_CREDITED]
        # A restarted producer resumes a live ring: what the consumer credited so far is
        # free, and the space fd's count is part of it. The consumer writes the fd before
        # it raises CREDITED and we read CREDITED before the drain, so a credit racing
        # with this is under-counted (a few bytes of this ring lost), never counted twice.
        _drain(fds.space)
        self._free = self.capacity - (self._head - credited)

    @property
    def dropped(self) -> int:
        return self._dropped

    def unread_bytes(self) -> int:
        """Bytes sent that the consumer has not read yet (its position, read live)."""
        return self._head - self._words[_TAIL]

    def fileno(self) -> int:
        return self._space

    def beat(self, now_ns: int | None = None) -> None:
        self._words[_PRODUCER_BEAT] = now_ns or _clock()

    def _reserve(self, need: int, block: bool, timeout_s: float) -> bool:
        self._free += _drain(self._space)
        if self._free >= need or not block:
            return self._free >= need
        deadline = time.monotonic() + timeout_s
        while self._free < need:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._wait(remaining):
                if self._free + _drain(self._space) >= need:
                    break
                raise RingFull(f"ring stayed full for {timeout_s:.3f} s ({need} bytes wanted)")
            self._free += _drain(self._space)
        self._free += _drain(self._space)
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
        length = HEADER_BYTES
        for part in parts:
            length += len(part)
        need = (length + _ALIGN_MASK) & ~_ALIGN_MASK
        if need > self.max_record_bytes:
            raise ValueError(
                f"record of {length} bytes exceeds this ring's limit of {self.max_record_bytes}"
            )
        position = self._head & self._mask
        to_end = self.capacity - position
        total = need if need <= to_end else to_end + need
        if total > self._free and not self._reserve(total, block, timeout_s):
            self._dropped += 1
            self._words[_DROPPED] = self._dropped
            return False
        data = self._data
        if need > to_end:
            _pack_pad(data, position, to_end, RecordKind.PAD)
            position = 0
        stamp = _clock() if stamp_ns is None else stamp_ns
        _pack_header(data, position, length, kind, flags, session_id, turn_id, stamp, origin_ns)
        cursor = position + HEADER_BYTES
        for part in parts:
            end = cursor + len(part)
            data[cursor:end] = part
            cursor = end
        self._head += total
        self._free -= total
        self._published += 1
        words = self._words
        words[_HEAD] = self._head
        words[_PUBLISHED] = self._published
        words[_PRODUCER_BEAT] = stamp
        _eventfd_write(self._doorbell, 1)
        return True


class RecordView:
    """A record read in place; valid until the consumer's `advance()`."""

    __slots__ = ("kind", "flags", "session_id", "turn_id", "stamp_ns", "origin_ns", "payload")

    def __init__(self, kind: RecordKind, header: tuple[int, ...], payload: memoryview) -> None:
        self.kind = kind
        _, _, self.flags, self.session_id, self.turn_id, self.stamp_ns, self.origin_ns = header
        self.payload = payload


class Consumer(_End):
    """The reading end."""

    def __init__(self, fds: RingFds, peer_pid: int | None = None) -> None:
        super().__init__(fds, peer_pid, fds.doorbell)
        words = self._words
        self._tail: int = words[_TAIL]
        self._owed: int = words[_OWED]
        # Bytes a dead consumer freed and had not credited yet stay lost to this ring: it
        # may have died between writing the space fd and raising CREDITED, and crediting
        # them again could hand the producer bytes that hold unread records.
        self._credited: int = self._tail
        words[_CREDITED] = self._tail
        self._credit_batch = self.capacity // 16
        self._current: int = 0  # padded size of the record under peek, 0 if none

    def fileno(self) -> int:
        return self._doorbell

    def beat(self, now_ns: int | None = None) -> None:
        self._words[_CONSUMER_BEAT] = now_ns or _clock()

    def pending(self) -> int:
        """Records published and not yet consumed, as far as the doorbell has told us."""
        if self._owed:  # read the doorbell only once the known records are consumed
            return self._owed
        fresh = _drain(self._doorbell)
        if fresh:
            self._owed = fresh
            self._words[_OWED] = fresh
        elif self._tail != self._credited:  # ran dry: hand the freed bytes back now
            self._credit()
        return self._owed

    def _credit(self) -> None:
        freed = self._tail - self._credited
        if 0 < freed <= self.capacity:  # a scribbled control block credits nothing
            _eventfd_write(self._space, freed)  # before CREDITED: see Producer.__init__
        self._credited = self._tail
        self._words[_CREDITED] = self._tail

    def wait(self, timeout_s: float | None) -> bool:
        """Wait until a record is pending; False on timeout."""
        if self.pending():
            return True
        return self._wait(timeout_s) and self.pending() > 0

    def peek(self) -> RecordView | None:
        """The next record, read in place, or None if none is pending."""
        found = self._next()
        if found is None:
            return None
        kind, header, start = found
        return RecordView(kind, header, self._data[start : start - HEADER_BYTES + header[0]])

    def _next(self) -> tuple[RecordKind, tuple[int, ...], int] | None:
        """Find the next record: its kind, its header and where its payload starts."""
        assert self._current == 0, "advance() the previous record first"
        if not self._owed and not self.pending():
            return None
        data = self._data
        position = self._tail & self._mask
        if position & _ALIGN_MASK:
            raise RingCorrupt(f"ring read position {position} is not {ALIGN}-byte aligned")
        to_end = self.capacity - position
        # One unpack of the whole header; only a PAD can sit in the last < 32 bytes.
        header = _unpack_header(data, position) if to_end >= HEADER_BYTES else None
        length, kind = _unpack_pad(data, position) if header is None else header[:2]
        if kind == RecordKind.PAD:
            # The producer pads exactly to the end of the ring, and never twice running.
            if length != to_end:
                raise RingCorrupt(f"corrupt ring padding of {length} bytes at offset {position}")
            self._tail += length  # credited with the record after it
            position, to_end = 0, self.capacity
            header = _unpack_header(data, 0)
            length, kind = header[:2]
            if kind == RecordKind.PAD:
                raise RingCorrupt("corrupt ring: padding follows padding")
        if header is None or not HEADER_BYTES <= length <= min(self.max_record_bytes, to_end):
            raise RingCorrupt(f"corrupt ring record length {length} at offset {position}")
        self._current = (length + _ALIGN_MASK) & ~_ALIGN_MASK
        record_kind = _KIND_OF.get(kind)
        if record_kind is None:
            self.advance()
            raise ValueError(f"skipped a record of unknown kind {kind}")
        return record_kind, header, position + HEADER_BYTES

    def resync(self) -> None:
        """Skip whatever the producer published, after that producer died leaving garbage
        (RingCorrupt): the next producer on this ring starts from an empty ring."""
        head = self._words[_HEAD]
        _drain(self._doorbell)
        self._tail, self._owed, self._current, self._credited = head, 0, 0, head
        self._mirror()
        self._words[_CREDITED] = head

    def advance(self) -> None:
        """Release the record returned by `peek()` so the producer may reuse its bytes."""
        assert self._current, "nothing to advance past"
        self._tail += self._current
        self._current = 0
        self._owed -= 1
        self._mirror()
        if self._tail - self._credited >= self._credit_batch:
            self._credit()

    def _mirror(self) -> None:
        words = self._words
        words[_TAIL] = self._tail
        words[_OWED] = self._owed
        words[_CONSUMER_BEAT] = _clock()

    def recv(self) -> Record | None:
        """The next record with its payload copied out, or None."""
        found = self._next()
        if found is None:
            return None
        kind, header, start = found
        _, _, flags, session_id, turn_id, stamp_ns, origin_ns = header
        start += CONTROL_BYTES  # the mapping's own slice copies once, with no view to release
        record: Record = _new_record(Record)
        _SET_KIND(record, kind)
        _SET_FLAGS(record, flags)
        _SET_SESSION(record, session_id)
        _SET_TURN(record, turn_id)
        _SET_STAMP(record, stamp_ns)
        _SET_ORIGIN(record, origin_ns)
        _SET_PAYLOAD(record, self._map[start : start - HEADER_BYTES + header[0]])
        self.advance()
        return record
