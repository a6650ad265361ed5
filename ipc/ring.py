"""Single-producer single-consumer byte ring in shared memory.

Memory (ipc/segment.py allocates and maps it): one `memfd` mapped by both processes
and handed to children with `pass_fds`, so nothing is left in /dev/shm when a process
crashes. Layout::

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

import os
import struct
import time

from voxrelay.ipc.records import ALIGN, HEADER, HEADER_BYTES, Record, RecordKind
from voxrelay.ipc.segment import (
    CONSUMER_BEAT,
    CONTROL_BYTES,
    CREDITED,
    DROPPED,
    HEAD,
    OWED,
    PRODUCER_BEAT,
    PUBLISHED,
    TAIL,
    PeerDied,
    RingCorrupt,
    RingEnd,
    RingFds,
    RingFull,
    create_ring,
    drain,
    dropped_records,
)

__all__ = [
    "CONTROL_BYTES",
    "Consumer",
    "PeerDied",
    "Producer",
    "RecordView",
    "RingCorrupt",
    "RingFds",
    "RingFull",
    "create_ring",
    "dropped_records",
]

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


class Producer(RingEnd):
    """The writing end. Audio uses `block=False` (drop and count when full)."""

    def __init__(self, fds: RingFds, peer_pid: int | None = None) -> None:
        super().__init__(fds, peer_pid, fds.space)
        words = self._words
        self._head: int = words[HEAD]
        self._published: int = words[PUBLISHED]
        self._dropped: int = words[DROPPED]
        credited = words[CREDITED]
        # A restarted producer resumes a live ring: what the consumer credited so far is
        # free, and the space fd's count is part of it. The consumer writes the fd before
        # it raises CREDITED and we read CREDITED before the drain, so a credit racing
        # with this is under-counted (a few bytes of this ring lost), never counted twice.
        drain(fds.space)
        self._free = self.capacity - (self._head - credited)

    @property
    def dropped(self) -> int:
        return self._dropped

    def unread_bytes(self) -> int:
        """Bytes sent that the consumer has not read yet (its position, read live)."""
        return self._head - self._words[TAIL]

    def fileno(self) -> int:
        return self._space

    def beat(self, now_ns: int | None = None) -> None:
        self._words[PRODUCER_BEAT] = now_ns or _clock()

    def _reserve(self, need: int, block: bool, timeout_s: float) -> bool:
        self._free += drain(self._space)
        if self._free >= need or not block:
            return self._free >= need
        deadline = time.monotonic() + timeout_s
        while self._free < need:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._wait(remaining):
                if self._free + drain(self._space) >= need:
                    break
                raise RingFull(f"ring stayed full for {timeout_s:.3f} s ({need} bytes wanted)")
            self._free += drain(self._space)
        self._free += drain(self._space)
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
            self._words[DROPPED] = self._dropped
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
        words[HEAD] = self._head
        words[PUBLISHED] = self._published
        words[PRODUCER_BEAT] = stamp
        _eventfd_write(self._doorbell, 1)
        return True


class RecordView:
    """A record read in place; valid until the consumer's `advance()`."""

    __slots__ = ("kind", "flags", "session_id", "turn_id", "stamp_ns", "origin_ns", "payload")

    def __init__(self, kind: RecordKind, header: tuple[int, ...], payload: memoryview) -> None:
        self.kind = kind
        _, _, self.flags, self.session_id, self.turn_id, self.stamp_ns, self.origin_ns = header
        self.payload = payload


class Consumer(RingEnd):
    """The reading end."""

    def __init__(self, fds: RingFds, peer_pid: int | None = None) -> None:
        super().__init__(fds, peer_pid, fds.doorbell)
        words = self._words
        self._tail: int = words[TAIL]
        self._owed: int = words[OWED]
        # Bytes a dead consumer freed and had not credited yet stay lost to this ring: it
        # may have died between writing the space fd and raising CREDITED, and crediting
        # them again could hand the producer bytes that hold unread records.
        self._credited: int = self._tail
        words[CREDITED] = self._tail
        self._credit_batch = self.capacity // 16
        self._current: int = 0  # padded size of the record under peek, 0 if none

    def fileno(self) -> int:
        return self._doorbell

    def beat(self, now_ns: int | None = None) -> None:
        self._words[CONSUMER_BEAT] = now_ns or _clock()

    def pending(self) -> int:
        """Records published and not yet consumed, as far as the doorbell has told us."""
        if self._owed:  # read the doorbell only once the known records are consumed
            return self._owed
        fresh = drain(self._doorbell)
        if fresh:
            self._owed = fresh
            self._words[OWED] = fresh
        elif self._tail != self._credited:  # ran dry: hand the freed bytes back now
            self._credit()
        return self._owed

    def _credit(self) -> None:
        freed = self._tail - self._credited
        if 0 < freed <= self.capacity:  # a scribbled control block credits nothing
            _eventfd_write(self._space, freed)  # before CREDITED: see Producer.__init__
        self._credited = self._tail
        self._words[CREDITED] = self._tail

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
        head = self._words[HEAD]
        drain(self._doorbell)
        self._tail, self._owed, self._current, self._credited = head, 0, 0, head
        self._mirror()
        self._words[CREDITED] = head

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
        words[TAIL] = self._tail
        words[OWED] = self._owed
        words[CONSUMER_BEAT] = _clock()

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
