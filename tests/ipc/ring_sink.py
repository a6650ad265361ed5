"""Child process for the hammer test: check every record against its sequence number.

Usage: ring_sink.py MEM DOOR SPACE PARENT_PID SEED
Exits 0 after END_OF_INPUT, 4 on a record out of order or with wrong bytes, 5 when no
record came for 5 s (a lost doorbell wake-up), 3 when the parent died.
"""

import random
import sys
import time

from voxrelay.ipc.records import RecordKind
from voxrelay.ipc.ring import Consumer, PeerDied, RingFds

memory, doorbell, space, parent, seed = (int(x) for x in sys.argv[1:6])
inbound = Consumer(RingFds(memory, doorbell, space), peer_pid=parent)
pause = random.Random(seed)
expected = 0
try:
    while True:
        if not inbound.wait(5.0):
            sys.exit(5)
        while (record := inbound.recv()) is not None:
            if record.kind == RecordKind.END_OF_INPUT:
                sys.exit(0 if record.session_id == expected else 4)
            body = bytes([expected % 251]) * (record.turn_id)
            if record.session_id != expected or record.payload != body:
                sys.exit(4)
            expected += 1
            # Sometimes fall behind (the producer meets a full ring and waits for space),
            # sometimes go straight back to sleep (the producer must ring us awake).
            if pause.random() < 0.02:
                time.sleep(pause.random() * 0.002)
except PeerDied:
    sys.exit(3)
