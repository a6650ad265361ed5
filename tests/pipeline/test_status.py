"""The stage status block: values cross processes whole, never torn."""

from __future__ import annotations

import subprocess
import sys
import time

from voxrelay.pipeline.status import StageStatus

# A carry through every byte: a byte-wise copy racing a read would mix the two.
BEFORE, AFTER = 0x00FF_FFFF_FFFF_FFFF, 0x0100_0000_0000_0000

# The writer is a fresh interpreter given the block's fd, as the stages are: a forked
# child of this (threaded) test process can deadlock on a lock another thread held at
# the fork, and a hung child then hangs the interpreter's exit (CI hit exactly that).
_FLIP = f"""
import sys, time
from voxrelay.pipeline.status import StageStatus
status = StageStatus.attach(int(sys.argv[1]))
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    for _ in range(1000):
        status.mark_ready({BEFORE})
        status.mark_ready({AFTER})
"""


def test_a_reader_never_sees_half_of_a_write() -> None:
    status = StageStatus.create("test")
    status.mark_ready(BEFORE)
    writer = subprocess.Popen(
        [sys.executable, "-c", _FLIP, str(status.fd), "1.5"], pass_fds=[status.fd]
    )
    try:
        # Read only once the writer flips (its interpreter takes a moment to start).
        start = time.monotonic()
        while status.ready_ns == BEFORE and time.monotonic() - start < 30:
            time.sleep(0.001)
        seen: set[int] = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            seen.update(status.ready_ns for _ in range(1000))
        assert writer.wait(30) == 0
    finally:
        writer.kill()
        writer.wait()
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
