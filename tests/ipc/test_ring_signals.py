"""How the ring's two eventfds carry records and freed bytes: batched credits, restarts
that resume a live ring, no lost wake-up under a hammer of full/empty transitions, no
CPU spent while idle, control-block words that are never torn."""

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from voxrelay.ipc.records import RecordKind, padded
from voxrelay.ipc.ring import Consumer, Producer, create_ring
from voxrelay.ipc.segment import PRODUCER_BEAT

SINK = Path(__file__).with_name("ring_sink.py")
RECORD = padded(32 + 600)  # a 600-byte payload's share of the ring
RECORDS = 20_000  # per hammer run: ~1 s


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _spawn(script: Path, fds: tuple[int, ...], *args: str) -> subprocess.Popen[bytes]:
    for fd in fds:
        os.set_inheritable(fd, True)
    command = [sys.executable, str(script), *map(str, fds), str(os.getpid()), *args]
    return subprocess.Popen(command, pass_fds=fds)


def test_freed_bytes_go_back_once_the_ring_runs_dry():
    fds = create_ring(1 << 16)
    producer, consumer = Producer(fds), Consumer(fds)
    for _ in range(10):
        producer.send(RecordKind.AUDIO_IN, b"\0" * 600)
    for _ in range(3):
        assert consumer.recv() is not None
    assert not _readable(fds.space)  # no syscall per record while records are waiting
    while consumer.recv() is not None:
        pass
    assert os.eventfd_read(fds.space) == 10 * RECORD  # all of it, exactly once
    for end in (producer, consumer):
        end.close()
    fds.close()


def test_a_stream_that_never_runs_dry_still_frees_space():
    """The consumer stays behind by two records, so it never finds the ring empty: the
    producer gets its bytes back in sixteenths of the ring, or it would stay full."""
    fds = create_ring(4096)
    producer, consumer = Producer(fds), Consumer(fds)
    for index in range(2):
        producer.send(RecordKind.TOKEN, bytes([index]) * 100)
    for index in range(2, 200):  # 200 x 136 bytes: ~7 times round the ring
        producer.send(RecordKind.TOKEN, bytes([index]) * 100, timeout_s=0.2)
        assert consumer.recv().payload == bytes([index - 2]) * 100
    for end in (producer, consumer):
        end.close()
    fds.close()


def _fill(producer: Producer, marker: int) -> list[bytes]:
    sent: list[bytes] = []
    while True:
        payload = bytes([(marker + len(sent)) % 256]) * 600
        if not producer.send(RecordKind.AUDIO_IN, payload, block=False):
            return sent
        sent.append(payload)


def test_restarted_producer_counts_free_space_from_what_was_credited():
    fds = create_ring(1 << 16)  # credits go back in 4 KiB batches
    producer, consumer = Producer(fds), Consumer(fds)
    first = _fill(producer, 0)
    assert [consumer.recv().payload for _ in range(3)] == first[:3]  # freed, not credited
    producer.close()  # as if its process died
    producer = Producer(fds)
    second = _fill(producer, 100)
    assert not second  # the 3 freed slots were not credited yet: nothing unread is reused
    received = []
    while (record := consumer.recv()) is not None:
        received.append(record.payload)
    assert received == first[3:] + second
    assert len(_fill(producer, 200)) == len(first)  # and nothing was lost on the way
    for end in (producer, consumer):
        end.close()
    fds.close()


def test_restarted_consumer_never_hands_back_bytes_twice():
    fds = create_ring(1 << 16)
    producer, consumer = Producer(fds), Consumer(fds)
    first = _fill(producer, 0)
    assert [consumer.recv().payload for _ in range(3)] == first[:3]
    consumer.close()  # died holding 3 records' worth of uncredited bytes
    consumer = Consumer(fds)
    received = []
    while (record := consumer.recv()) is not None:
        received.append(record.payload)
    assert received == first[3:]
    second = _fill(producer, 100)  # the dead consumer's 3 slots are not handed out
    assert len(second) == len(first) - 3
    assert [consumer.recv().payload for _ in second] == second
    producer.close()
    producer = Producer(fds)  # a restarted producer counts from CREDITED: all back
    assert consumer.recv() is None and len(_fill(producer, 200)) == len(first)
    for end in (producer, consumer):
        end.close()
    fds.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_no_lost_wake_up_under_a_hammer_of_full_and_empty(seed):
    """A 4 KiB ring between two real processes, records of random sizes, both sides
    pausing at random: thousands of transitions between an empty ring (the consumer
    asleep on the doorbell) and a full one (the producer asleep on the space fd). A
    lost doorbell shows as the sink's 5 s timeout (exit 5), a lost credit as RingFull."""
    import random

    fds = create_ring(4096)
    sink = _spawn(SINK, fds.as_tuple(), str(seed))
    producer = Producer(fds, peer_pid=sink.pid)
    sizes = random.Random(seed)
    try:
        for index in range(RECORDS):
            size = sizes.choice([0, 8, 100, 600, 990])
            producer.send(
                RecordKind.TOKEN,
                bytes([index % 251]) * size,
                session_id=index,
                turn_id=size,
                timeout_s=5.0,
            )
            if sizes.random() < 0.01:
                time.sleep(sizes.random() * 0.002)  # let the sink fall asleep
        producer.send(RecordKind.END_OF_INPUT, session_id=RECORDS, timeout_s=5.0)
        assert sink.wait(10) == 0
    finally:
        sink.kill()
        sink.wait()
        producer.close()
        fds.close()


_IDLE = """
import sys, time
from voxrelay.ipc.ring import Consumer, RingFds
consumer = Consumer(RingFds(*map(int, sys.argv[1:4])), peer_pid=int(sys.argv[4]))
start = time.process_time()
assert not consumer.wait(1.0)
print(time.process_time() - start)
"""


def test_an_idle_consumer_sleeps_in_the_kernel():
    fds = create_ring(4096)
    for fd in fds.as_tuple():
        os.set_inheritable(fd, True)
    child = subprocess.run(
        [sys.executable, "-c", _IDLE, *map(str, fds.as_tuple()), str(os.getpid())],
        pass_fds=fds.as_tuple(),
        capture_output=True,
        check=True,
        timeout=30,
    )
    cpu_s = float(child.stdout)
    assert cpu_s < 0.01, f"an idle consumer used {cpu_s * 1000:.1f} ms of CPU in 1 s"
    fds.close()


_FLIP = """
import sys, time
from voxrelay.ipc.ring import Producer, RingFds
producer = Producer(RingFds(*map(int, sys.argv[1:4])))
deadline = time.monotonic() + 1.5
while time.monotonic() < deadline:
    for _ in range(1000):
        producer.beat(0x00FF_FFFF_FFFF_FFFF)
        producer.beat(0x0100_0000_0000_0000)
"""


def test_a_control_word_is_never_read_half_written():
    """A carry through every byte: a byte-wise store racing the read would mix the two."""
    before, after = 0x00FF_FFFF_FFFF_FFFF, 0x0100_0000_0000_0000
    fds = create_ring(4096)
    for fd in fds.as_tuple():
        os.set_inheritable(fd, True)
    writer = subprocess.Popen(
        [sys.executable, "-c", _FLIP, *map(str, fds.as_tuple())], pass_fds=fds.as_tuple()
    )
    consumer = Consumer(fds)
    words = consumer._words
    try:
        start = time.monotonic()
        while words[PRODUCER_BEAT] != after and time.monotonic() - start < 30:
            time.sleep(0.001)
        seen: set[int] = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            seen.update(words[PRODUCER_BEAT] for _ in range(1000))
        assert writer.wait(30) == 0
    finally:
        writer.kill()
        writer.wait()
    assert seen == {before, after}, {hex(v) for v in seen - {before, after}}
    del words
    consumer.close()
    fds.close()
