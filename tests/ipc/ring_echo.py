"""Child process for the two-process ring tests: echo every record back, then exit.

Usage: ring_echo.py IN_MEM IN_DOOR IN_SPACE OUT_MEM OUT_DOOR OUT_SPACE PARENT_PID
"""

import sys

from voxrelay.ipc.records import RecordKind
from voxrelay.ipc.ring import Consumer, PeerDied, Producer, RingFds

fds = [int(x) for x in sys.argv[1:7]]
parent = int(sys.argv[7])
inbound = Consumer(RingFds(*fds[:3]), peer_pid=parent)
outbound = Producer(RingFds(*fds[3:]), peer_pid=parent)
try:
    while True:
        if not inbound.wait(5.0):
            break
        while (record := inbound.recv()) is not None:
            if record.kind == RecordKind.END_OF_INPUT:
                sys.exit(0)
            outbound.send(
                record.kind,
                record.payload,
                session_id=record.session_id,
                turn_id=record.turn_id,
                stamp_ns=record.stamp_ns,
                timeout_s=5.0,
            )
except PeerDied:
    sys.exit(3)
