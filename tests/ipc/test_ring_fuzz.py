"""A misbehaving peer: garbage written into a real ring, read by the real consumer.

Whatever the bytes, `Consumer.recv` returns a well-formed record, None, or raises
ValueError (a record of unknown kind, skipped) or RingCorrupt (framing lost: the ring
stays stuck until `resync`); never another exception, never a hang. Short in CI,
10,000 examples per target under `make soak`.
"""

import contextlib
import gc
import mmap
import os
import random
import struct

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.soak import bounded_resources, examples
from voxrelay.ipc.records import (
    HEADER,
    HEADER_BYTES,
    Record,
    RecordKind,
    decode,
    padded,
    split_text_pair,
)
from voxrelay.ipc.ring import CONTROL_BYTES, Consumer, Producer, RingCorrupt, create_ring

pytestmark = pytest.mark.soak

CAPACITY = 4096
SETTINGS = settings(
    max_examples=examples(300),
    deadline=1000,  # ms per example: a hang fails the example, not the whole run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
U32 = st.integers(0, 2**32 - 1)
HEADERS = st.tuples(
    st.one_of(st.integers(0, 96), U32),  # length: small, or anything
    st.one_of(st.sampled_from([int(k) for k in RecordKind]), st.integers(0, 65535)),
    st.integers(0, 65535),  # flags
    U32,  # session
    U32,  # turn
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.binary(max_size=200),  # payload actually written after the header
)


def _consume(fds, published: int, tail: int | None = None, owed: int = 0) -> list:
    if tail is not None:
        with mmap.mmap(fds.memory, CONTROL_BYTES) as control:
            struct.pack_into("<QQq", control, 128, tail, owed, 0)
    if published:
        os.eventfd_write(fds.doorbell, published)
    consumer = Consumer(fds)
    outcomes: list = []
    try:
        for _ in range(published + 2):  # bounded: a loop that never ends fails here
            try:
                record = consumer.recv()
            except RingCorrupt:
                outcomes.append("corrupt")
                _recovers_after_resync(fds, consumer)
                break
            except ValueError:
                outcomes.append("skipped")
                continue
            if record is None:
                break
            assert isinstance(record, Record) and record.kind in RecordKind
            outcomes.append(record)
    finally:
        consumer.close()
    return outcomes


def _recovers_after_resync(fds, consumer: Consumer) -> None:
    """What the supervisor does once the corrupting producer is dead: skip to its head,
    and a new producer on the same ring is heard again."""
    consumer.resync()
    producer = Producer(fds)
    try:
        assert producer.send(RecordKind.STAMP, b"after", session_id=7, block=False)
        record = consumer.recv()
        assert record is not None and record.payload == b"after" and record.session_id == 7
    finally:
        producer.close()


def _ring_with(data: bytes):
    fds = create_ring(CAPACITY)
    with mmap.mmap(fds.memory, CONTROL_BYTES + CAPACITY) as memory:
        memory[CONTROL_BYTES : CONTROL_BYTES + len(data)] = data
    return fds


@SETTINGS
@given(data=st.binary(max_size=CAPACITY), published=st.integers(1, 40))
def _random_bytes(data: bytes, published: int) -> None:
    fds = _ring_with(data)
    try:
        _consume(fds, published)
    finally:
        fds.close()


@SETTINGS
@given(headers=st.lists(HEADERS, min_size=1, max_size=12), extra=st.integers(0, 5))
def _lying_headers(headers, extra: int) -> None:
    data = bytearray()
    for length, kind, flags, session, turn, stamp, origin, payload in headers:
        chunk = HEADER.pack(length, kind, flags, session, turn, stamp, origin) + payload
        data += chunk + bytes(padded(len(chunk)) - len(chunk))
    fds = _ring_with(bytes(data[:CAPACITY]))
    try:
        for outcome in _consume(fds, len(headers) + extra):
            if isinstance(outcome, Record):  # what was returned is what the bytes said
                assert len(outcome.payload) <= CAPACITY // 4 - HEADER_BYTES
    finally:
        fds.close()


@SETTINGS
@given(
    data=st.binary(max_size=512),
    tail=st.integers(0, 2**64 - 1),
    owed=st.integers(0, 2**64 - 1),
    published=st.integers(0, 10),
)
def _garbage_control_block(data: bytes, tail: int, owed: int, published: int) -> None:
    """A peer that scribbled over the consumer's mirrored tail and owed count (what a
    restarted stage resumes from)."""
    fds = _ring_with(data)
    try:
        _consume(fds, published, tail=tail, owed=owed)
    finally:
        fds.close()


@SETTINGS
@given(raw=st.binary(max_size=300))
def _decode_bytes(raw: bytes) -> None:
    """The message-channel path (zmq) and the text-pair body use the same decoding."""
    try:
        record = decode(raw)
    except ValueError:
        return
    assert record.kind in RecordKind and len(record.payload) <= len(raw) - HEADER_BYTES
    with contextlib.suppress(ValueError):
        split_text_pair(record.payload)


def test_random_bytes_in_a_ring():
    with bounded_resources(max_rss_growth_bytes=None):  # memory: the test below
        _random_bytes()


def test_records_whose_headers_lie():
    with bounded_resources(max_rss_growth_bytes=None):  # memory: the test below
        _lying_headers()


def test_a_scribbled_consumer_control_block():
    with bounded_resources(max_rss_growth_bytes=None):  # memory: the test below
        _garbage_control_block()


def test_decoding_arbitrary_messages():
    with bounded_resources(max_rss_growth_bytes=None):  # memory: the test below
        _decode_bytes()


def test_reading_garbage_holds_no_memory():
    """The fuzz targets' memory, without Hypothesis's bookkeeping: the same lying headers
    drawn by a seeded `random`, through the same consumer; RSS flat after a warm-up."""
    rng = random.Random(8)
    kinds = [int(k) for k in RecordKind]
    process = psutil.Process()
    rounds = examples(1000)
    with bounded_resources(max_rss_growth_bytes=None):
        for index in range(rounds):
            data, count = bytearray(), rng.randint(1, 12)
            for _ in range(count):
                length = rng.choice([rng.randint(0, 96), rng.getrandbits(32)])
                kind = rng.choice([rng.choice(kinds), rng.getrandbits(16)])
                fields = [rng.getrandbits(16), rng.getrandbits(32), rng.getrandbits(32)]
                stamps = [rng.getrandbits(63), rng.getrandbits(63)]
                chunk = HEADER.pack(length, kind, *fields, *stamps)
                chunk += rng.randbytes(rng.randint(0, 200))
                data += chunk + bytes(padded(len(chunk)) - len(chunk))
            fds = _ring_with(bytes(data[:CAPACITY]))
            try:
                _consume(fds, count + rng.randint(0, 5))
            finally:
                fds.close()
            if index == rounds // 10:
                gc.collect()
                warm = process.memory_info().rss
    gc.collect()
    growth = process.memory_info().rss - warm
    assert growth < 2 << 20, f"RSS grew by {growth / 2**20:.2f} MiB over {rounds} rings"
