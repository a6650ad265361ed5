"""One-way latency between two processes: ring vs pyzmq vs pyzmq+JSON vs mp.Queue.

The sender stamps `perf_counter_ns()` into each message; the receiver, blocked in its
transport's own wait (poll on an eventfd, zmq poll, Queue.get), subtracts it from its
own clock on arrival. CLOCK_MONOTONIC is shared by all processes, so the difference is
the one-way latency including the wake-up. Messages are spaced so each one finds the
receiver asleep, the case a voice pipeline lives in (one token every few tens of ms).
The transports take turns, a few hundred messages each per round, so a burst of load
from elsewhere on the machine falls on all of them alike: compare within one run.

`ipc.ring.idle_cpu_pct`: the CPU a ring consumer uses while it waits with no traffic
(it must sleep in the kernel, not spin). `ipc.ring.*_us.warm|cold`: one send and one
recv in a single process, back to back (warm), and each after 32 MiB were written to
evict the caches (cold: what a process that wakes from sleep meets, docs/ipc.md).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zmq

from voxrelay.ipc.records import HEADER_BYTES, RecordKind
from voxrelay.ipc.ring import Consumer, Producer, create_ring

STAMP = struct.Struct("<q")
MESSAGES = 250  # per transport per round
ROUNDS = 8
WARMUP = 100
GAP_S = 0.001
IDLE_S = 2.0
PLACEMENTS = ("same_cpu", "other_cpu")  # the receiver's CPU: the sender's, or the next
PLACED_ROUNDS = 3
EVICT_BYTES = 32 << 20
COLD_ROUNDS = 200


def _pace(index: int, start: float) -> None:
    # Sleep, never spin: a spinning sender would hold the GIL that mp.Queue's feeder
    # thread needs, and charge the queue for our pacing.
    delay = start + index * GAP_S - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def _ring_pair() -> tuple[Callable[[], Any], Callable[[], Any]]:
    fds = create_ring(1 << 20)

    def sender() -> Callable[[bytes], None]:
        producer = Producer(fds)
        return lambda payload: producer.send(RecordKind.TOKEN, payload)

    def receiver() -> Callable[[], bytes]:
        consumer = Consumer(fds)

        def recv() -> bytes:
            while True:
                record = consumer.recv()
                if record is not None:
                    return record.payload
                consumer.wait(None)

        return recv

    return sender, receiver


def _zmq_pair(as_json: bool) -> tuple[Callable[[], Any], Callable[[], Any]]:
    endpoint = f"ipc://{tempfile.mkdtemp(prefix='vxr-bench-')}/s"

    def sender() -> Callable[[bytes], None]:
        socket = zmq.Context().socket(zmq.PUSH)
        socket.connect(endpoint)
        if as_json:
            return lambda payload: socket.send(
                json.dumps(
                    {
                        "kind": "token",
                        "stamp": STAMP.unpack_from(payload)[0],
                        "data": payload[8:].hex(),
                    }
                ).encode()
            )
        return lambda payload: socket.send(payload, copy=False)

    def receiver() -> Callable[[], bytes]:
        socket = zmq.Context().socket(zmq.PULL)
        socket.bind(endpoint)
        if as_json:

            def recv_json() -> bytes:
                message = json.loads(socket.recv())
                return STAMP.pack(message["stamp"]) + bytes.fromhex(message["data"])

            return recv_json
        return lambda: bytes(socket.recv())

    return sender, receiver


def _queue_pair() -> tuple[Callable[[], Any], Callable[[], Any]]:
    queue: mp.Queue[bytes] = mp.get_context("fork").Queue()
    return (lambda: queue.put), (lambda: queue.get)


def _receive(make_receiver: Callable[[], Any], count: int, conn: Any, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})  # before the receiver exists: zmq's threads follow
    recv = make_receiver()
    conn.send("ready")
    latencies = np.empty(count, dtype=np.int64)
    for index in range(count):
        payload = recv()
        latencies[index] = time.perf_counter_ns() - STAMP.unpack_from(payload)[0]
    conn.send(latencies.tobytes())


def measure(
    make_pair: Callable[[], tuple[Callable[[], Any], Callable[[], Any]]],
    size: int,
    placement: str | None = None,
) -> np.ndarray:
    """One-way latencies (us). `placement`: None leaves both processes to the scheduler;
    "same_cpu" / "other_cpu" pin the sender to the first CPU this process may use and the
    receiver to that one or the next."""
    context = mp.get_context("fork")
    make_sender, make_receiver = make_pair()
    parent, child = context.Pipe()
    total = MESSAGES + WARMUP
    allowed = os.sched_getaffinity(0)
    cpus = sorted(allowed)
    receiver_cpu = None if placement is None else cpus[PLACEMENTS.index(placement)]
    args = (make_receiver, total, child, receiver_cpu)
    process = context.Process(target=_receive, args=args)
    process.start()
    try:
        if placement is not None:
            os.sched_setaffinity(0, {cpus[0]})
        send = make_sender()
        assert parent.recv() == "ready"
        time.sleep(0.05)
        filler = os.urandom(max(0, size - STAMP.size))
        start = time.perf_counter()
        for index in range(total):
            _pace(index, start)
            send(STAMP.pack(time.perf_counter_ns()) + filler)
        latencies = np.frombuffer(parent.recv(), dtype=np.int64)[WARMUP:]
    finally:
        os.sched_setaffinity(0, allowed)  # the benchmarks after this one get every CPU
    process.join(10)
    return latencies / 1000.0  # microseconds


TRANSPORTS: dict[str, Callable[[], tuple[Callable[[], Any], Callable[[], Any]]]] = {
    "ring": _ring_pair,
    "zmq": lambda: _zmq_pair(False),
    "zmq_json": lambda: _zmq_pair(True),
    "mp_queue": _queue_pair,
}


def idle_cpu_pct(seconds: float = IDLE_S) -> float:
    """CPU time a ring consumer spends in `wait` over `seconds` with nothing sent, as a
    percentage of one core (its process's user + system time, the wait alone)."""
    context = mp.get_context("fork")
    fds = create_ring(1 << 16)
    parent, child = context.Pipe()

    def waiter() -> None:
        consumer = Consumer(fds)
        before = resource.getrusage(resource.RUSAGE_SELF)
        woke = consumer.wait(seconds)
        after = resource.getrusage(resource.RUSAGE_SELF)
        used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        child.send((woke, used))

    process = context.Process(target=waiter)
    process.start()
    woke, used_s = parent.recv()
    process.join(10)
    fds.close()
    assert not woke, "nothing was sent, yet the consumer woke with a record"
    return 100.0 * used_s / seconds


def ring_call_costs() -> dict[str, float]:
    """Median cost of one `send` and one `recv` of a 640-byte record in one process:
    back to back (warm), and each right after 32 MiB were written (cold)."""
    fds = create_ring(1 << 20)
    producer, consumer = Producer(fds), Consumer(fds)
    payload = os.urandom(640 - HEADER_BYTES)
    evict = np.ones(EVICT_BYTES // 8)
    results: dict[str, float] = {}
    for state in ("warm", "cold"):
        cold = state == "cold"
        send_ns, recv_ns = [], []
        for _ in range(COLD_ROUNDS):
            if cold:
                evict += 1.0
            start = time.perf_counter_ns()
            producer.send(RecordKind.TOKEN, payload)
            sent = time.perf_counter_ns()
            if cold:
                evict += 1.0
            reading = time.perf_counter_ns()
            record = consumer.recv()
            done = time.perf_counter_ns()
            assert record is not None and len(record.payload) == len(payload)
            send_ns.append(sent - start)
            recv_ns.append(done - reading)
        for key, spent in (("send", send_ns), ("recv", recv_ns)):
            results[f"ipc.ring.{key}_us.{state}"] = round(float(np.median(spent)) / 1e3, 2)
    for end in (producer, consumer):
        end.close()
    fds.close()
    return results


def placed(results: dict[str, float]) -> None:
    """640 B with the receiver on the sender's CPU and on the other one: on a VM whose
    idle vCPUs halt, waking the other one is most of the latency (docs/ipc.md)."""
    if len(os.sched_getaffinity(0)) < 2:
        return
    for placement in PLACEMENTS:
        samples: dict[str, list[np.ndarray]] = {name: [] for name in TRANSPORTS}
        for _ in range(PLACED_ROUNDS):
            for name, make_pair in TRANSPORTS.items():
                samples[name].append(measure(make_pair, 640, placement))
        for name, rounds in samples.items():
            p50 = float(np.percentile(np.concatenate(rounds), 50))
            results[f"ipc.{name}.p50_us.640.{placement}"] = round(p50, 1)


def run() -> dict[str, float]:
    results: dict[str, float] = {}
    for size in (16, 640):
        samples: dict[str, list[np.ndarray]] = {name: [] for name in TRANSPORTS}
        for _ in range(ROUNDS):
            for name, make_pair in TRANSPORTS.items():
                samples[name].append(measure(make_pair, size))
        for name, rounds in samples.items():
            micros = np.concatenate(rounds)
            results[f"ipc.{name}.p50_us.{size}"] = round(float(np.percentile(micros, 50)), 1)
            results[f"ipc.{name}.p99_us.{size}"] = round(float(np.percentile(micros, 99)), 1)
        ring_p50 = results[f"ipc.ring.p50_us.{size}"]
        for name in ("zmq", "zmq_json", "mp_queue"):
            results[f"ipc.{name}_over_ring.p50.{size}"] = round(
                results[f"ipc.{name}.p50_us.{size}"] / ring_p50, 2
            )
    placed(results)
    results["ipc.ring.idle_cpu_pct"] = round(idle_cpu_pct(), 3)
    results.update(ring_call_costs())
    return results


def table(results: dict[str, float]) -> str:
    lines = [
        "one-way latency between two processes (us)",
        f"{'transport':10} {'size':>5} {'p50':>8} {'p99':>8} {'p50 / ring':>11}",
    ]
    for size in (16, 640):
        for name in TRANSPORTS:
            ratio = results.get(f"ipc.{name}_over_ring.p50.{size}", 1.0)
            lines.append(
                f"{name:10} {size:>5} {results[f'ipc.{name}.p50_us.{size}']:>8.1f} "
                f"{results[f'ipc.{name}.p99_us.{size}']:>8.1f} {ratio:>10.2f}x"
            )
    for placement in PLACEMENTS:
        if f"ipc.ring.p50_us.640.{placement}" in results:
            lines.append(
                f"640 B p50, receiver on the {placement.replace('_', ' ')}: "
                + ", ".join(
                    f"{name} {results[f'ipc.{name}.p50_us.640.{placement}']:.1f}"
                    for name in TRANSPORTS
                )
            )
    lines.append(
        f"ring consumer waiting {IDLE_S:.0f} s with no traffic: "
        f"{results['ipc.ring.idle_cpu_pct']:.3f}% of a core"
    )
    lines.append(
        "ring calls in one process (us): "
        + ", ".join(
            f"{key} {state} {results[f'ipc.ring.{key}_us.{state}']:.2f}"
            for state in ("warm", "cold")
            for key in ("send", "recv")
        )
    )
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = run()
    print(table(outcome))
