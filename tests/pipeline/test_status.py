"""The stage status block: values cross processes whole, never torn."""

from __future__ import annotations

import multiprocessing
import time

from pipeline.status import StageStatus

# A carry through every byte: a byte-wise copy racing a read would mix the two.
BEFORE, AFTER = 0x00FF_FFFF_FFFF_FFFF, 0x0100_0000_0000_0000


def _flip(fd: int, seconds: float) -> None:
    status = StageStatus.attach(fd)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(1000):
            status.mark_ready(BEFORE)
            status.mark_ready(AFTER)


def test_a_reader_never_sees_half_of_a_write() -> None:
    status = StageStatus.create("test")
    status.mark_ready(BEFORE)
    writer = multiprocessing.get_context("fork").Process(target=_flip, args=(status.fd, 1.5))
    writer.start()
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            seen.update(status.ready_ns for _ in range(1000))
    finally:
        writer.join(10)
    assert writer.exitcode == 0
    assert seen == {BEFORE, AFTER}, {hex(v) for v in seen - {BEFORE, AFTER}}
    status.close()


def test_values_round_trip_and_reset() -> None:
    status = StageStatus.create("test")
    other = StageStatus.attach(status.fd)
    other.beat()
    other.mark_ready(1234)
    assert 0 < status.heartbeat_ns <= time.perf_counter_ns() and status.ready_ns == 1234
    status.reset()
    assert (other.heartbeat_ns, other.ready_ns) == (0, 0)
    status.close()
