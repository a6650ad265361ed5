"""One channel interface over two transports, chosen by configuration.

`shm`: the shared-memory ring (same host; the fast path). `zmq`: PUSH/PULL over TCP
for stages on different hosts; it carries the very same binary records.

A channel is described to a child process by a short spec string; the parent keeps
the shared-memory file descriptors open so a restarted stage can attach again.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Protocol

import zmq

from voxrelay.ipc.records import HEADER_BYTES, Record, RecordKind, decode, pack_header
from voxrelay.ipc.ring import Consumer, Producer, RingFds, create_ring


class Sender(Protocol):
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
    ) -> bool: ...

    def close(self) -> None: ...


class Receiver(Protocol):
    def recv(self) -> Record | None: ...

    def pollable(self) -> int | zmq.Socket[bytes]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ChannelSpec:
    """How to reach one channel: ring fds, or a zmq endpoint."""

    transport: str
    ring: RingFds | None = None
    endpoint: str = ""

    def encode(self) -> str:
        if self.ring is not None:
            return "shm:" + ",".join(str(fd) for fd in self.ring.as_tuple())
        return "zmq:" + self.endpoint

    @staticmethod
    def parse(text: str) -> ChannelSpec:
        transport, _, rest = text.partition(":")
        if transport == "shm":
            memory, doorbell, space = (int(x) for x in rest.split(","))
            return ChannelSpec("shm", ring=RingFds(memory, doorbell, space))
        if transport == "zmq":
            return ChannelSpec("zmq", endpoint=rest)
        raise ValueError(f"unknown channel transport {transport!r} (use 'shm' or 'zmq')")

    def inheritable_fds(self) -> tuple[int, ...]:
        return self.ring.as_tuple() if self.ring is not None else ()


def _free_tcp_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def make_channel(transport: str, capacity_bytes: int, host: str = "127.0.0.1") -> ChannelSpec:
    if transport == "shm":
        ring = create_ring(capacity_bytes)
        for fd in ring.as_tuple():
            os.set_inheritable(fd, True)
        return ChannelSpec("shm", ring=ring)
    if transport == "zmq":
        return ChannelSpec("zmq", endpoint=f"tcp://{host}:{_free_tcp_port(host)}")
    raise ValueError(f"unknown channel transport {transport!r} (use 'shm' or 'zmq')")


class RingReceiver:
    def __init__(self, fds: RingFds) -> None:
        self.ring = Consumer(fds)

    def recv(self) -> Record | None:
        return self.ring.recv()

    def pollable(self) -> int:
        return self.ring.fileno()

    def close(self) -> None:
        self.ring.close()


class ZmqSender:
    """PUSH socket; drops (block=False) or waits (block=True) like the ring does."""

    def __init__(
        self, endpoint: str, context: zmq.Context[zmq.Socket[bytes]] | None = None
    ) -> None:
        self._socket = (context or zmq.Context.instance()).socket(zmq.PUSH)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, 10_000)
        self._socket.connect(endpoint)
        self.dropped = 0

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
        length = HEADER_BYTES + sum(len(p) for p in parts)
        stamp = time.perf_counter_ns() if stamp_ns is None else stamp_ns
        header = pack_header(length, kind, flags, session_id, turn_id, stamp, origin_ns)
        frame = b"".join([header, *(bytes(p) for p in parts)])
        if block:
            if not self._socket.poll(int(timeout_s * 1000), zmq.POLLOUT):
                raise TimeoutError(f"zmq peer did not take a record for {timeout_s:.3f} s")
            self._socket.send(frame, copy=False)
            return True
        try:
            self._socket.send(frame, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.dropped += 1
            return False
        return True

    def close(self) -> None:
        self._socket.close(0)


class ZmqReceiver:
    def __init__(
        self, endpoint: str, context: zmq.Context[zmq.Socket[bytes]] | None = None
    ) -> None:
        self._socket = (context or zmq.Context.instance()).socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(endpoint)

    def recv(self) -> Record | None:
        try:
            frame = self._socket.recv(zmq.NOBLOCK, copy=True)
        except zmq.Again:
            return None
        return decode(frame)

    def pollable(self) -> zmq.Socket[bytes]:
        socket: zmq.Socket[bytes] = self._socket
        return socket

    def close(self) -> None:
        self._socket.close(0)


def open_sender(spec: ChannelSpec) -> Sender:
    if spec.ring is not None:
        return Producer(spec.ring)
    return ZmqSender(spec.endpoint)


def open_receiver(spec: ChannelSpec) -> Receiver:
    if spec.ring is not None:
        return RingReceiver(spec.ring)
    return ZmqReceiver(spec.endpoint)
