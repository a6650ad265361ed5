import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voxrelay.ipc.records import RecordKind
from voxrelay.ipc.ring import Consumer, PeerDied, Producer, RingFull, create_ring

ECHO = Path(__file__).with_name("ring_echo.py")


@pytest.fixture
def ring():
    fds = create_ring(4096)
    producer, consumer = Producer(fds), Consumer(fds)
    yield producer, consumer
    producer.close()
    consumer.close()
    fds.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 900), st.integers(0, 3)), min_size=1, max_size=80))
def test_fifo_payloads_survive_wraparound(ops):
    """Random sizes and random send/recv interleavings: order and bytes preserved."""
    fds = create_ring(4096)
    producer, consumer = Producer(fds), Consumer(fds)
    sent: list[bytes] = []
    received: list[bytes] = []
    for counter, (size, reads) in enumerate(ops):
        payload = bytes([counter % 251]) * size
        if producer.send(RecordKind.AUDIO_IN, payload, session_id=counter, block=False):
            sent.append(payload)
        for _ in range(reads):
            record = consumer.recv()
            if record is None:
                break
            received.append(record.payload)
    while (record := consumer.recv()) is not None:
        received.append(record.payload)
    assert received == sent
    assert producer.dropped == len(ops) - len(sent)
    producer.close()
    consumer.close()
    fds.close()


def test_header_fields_round_trip(ring):
    producer, consumer = ring
    producer.send(
        RecordKind.TOKEN, b"ab", b"cd", session_id=7, turn_id=3, stamp_ns=123, origin_ns=-5, flags=1
    )
    record = consumer.recv()
    assert record is not None
    assert (record.kind, record.session_id, record.turn_id) == (RecordKind.TOKEN, 7, 3)
    assert (record.stamp_ns, record.origin_ns, record.flags, record.payload) == (
        123,
        -5,
        1,
        b"abcd",
    )
    assert consumer.recv() is None


def test_full_ring_drops_audio_and_counts(ring):
    producer, consumer = ring
    accepted = 0
    while producer.send(RecordKind.AUDIO_IN, b"\0" * 600, block=False):
        accepted += 1
    assert accepted >= 5
    assert not producer.send(RecordKind.AUDIO_IN, b"\0" * 600, block=False)
    assert producer.dropped == 2
    assert consumer.pending() == accepted  # nothing already sent was lost


def test_blocking_send_times_out_when_full(ring):
    producer, _ = ring
    while producer.send(RecordKind.AUDIO_IN, b"\0" * 600, block=False):
        pass
    start = time.monotonic()
    with pytest.raises(RingFull):
        producer.send(RecordKind.TOKEN, b"\0" * 600, timeout_s=0.05)
    assert 0.04 < time.monotonic() - start < 1.0


def test_oversized_record_is_refused_with_a_clear_error(ring):
    producer, _ = ring
    with pytest.raises(ValueError, match="exceeds this ring's limit"):
        producer.send(RecordKind.AUDIO_IN, b"\0" * 4096)


def test_restarted_consumer_resumes_where_the_old_one_stopped(ring):
    producer, consumer = ring
    for i in range(5):
        producer.send(RecordKind.TOKEN, bytes([i]))
    assert consumer.recv().payload == b"\0"
    assert consumer.pending() == 4
    consumer.close()  # as if the process died: the new one attaches to the same fds
    replacement = Consumer(producer.fds)
    assert [replacement.recv().payload for _ in range(4)] == [bytes([i]) for i in range(1, 5)]
    replacement.close()


def _spawn_echo(inbound, outbound):
    fds = (*inbound.as_tuple(), *outbound.as_tuple())
    for fd in fds:
        os.set_inheritable(fd, True)
    return subprocess.Popen(
        [sys.executable, str(ECHO), *map(str, fds), str(os.getpid())], pass_fds=fds
    )


def test_two_processes_echo_records_in_order():
    to_child, from_child = create_ring(1 << 16), create_ring(1 << 16)
    child = _spawn_echo(to_child, from_child)
    producer = Producer(to_child, peer_pid=child.pid)
    consumer = Consumer(from_child, peer_pid=child.pid)
    payloads = [os.urandom(n) for n in (0, 16, 640, 3000, 7)] * 40
    received = []
    for i, payload in enumerate(payloads):
        producer.send(RecordKind.TOKEN, payload, session_id=i, timeout_s=5)
        while (record := consumer.recv()) is not None:
            received.append(record)
    while len(received) < len(payloads):
        assert consumer.wait(5.0)
        while (record := consumer.recv()) is not None:
            received.append(record)
    assert [r.payload for r in received] == payloads
    assert [r.session_id for r in received] == list(range(len(payloads)))
    producer.send(RecordKind.END_OF_INPUT)
    assert child.wait(5) == 0


def test_killed_peer_is_detected_within_50_ms():
    to_child, from_child = create_ring(1 << 16), create_ring(1 << 16)
    child = _spawn_echo(to_child, from_child)
    consumer = Consumer(from_child, peer_pid=child.pid)
    time.sleep(0.3)  # let it block in its own wait
    killed_at = time.perf_counter()
    os.kill(child.pid, signal.SIGKILL)
    with pytest.raises(PeerDied):
        consumer.wait(5.0)
    assert time.perf_counter() - killed_at < 0.05
    child.wait()


def test_peek_reads_the_shared_mapping_in_place(ring):
    """Zero-copy: the view is the ring's memory, so a byte changed there shows through it."""
    producer, consumer = ring
    producer.send(RecordKind.AUDIO_IN, b"\1\2\3\4")
    view = consumer.peek()
    assert view is not None and isinstance(view.payload, memoryview)
    assert bytes(view.payload) == b"\1\2\3\4"
    with mmap.mmap(producer.fds.memory, 0) as other:
        start = other.find(b"\1\2\3\4")
        other[start] = 9  # through a second mapping of the same memfd
    assert bytes(view.payload) == b"\x09\2\3\4"
    view.payload.release()
    consumer.advance()
    assert consumer.recv() is None
