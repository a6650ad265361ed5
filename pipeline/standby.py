"""Warm standby: one spare process per stage, models loaded, waiting to take over.

A cold restart costs an interpreter, the imports and a model load (seconds); a standby
has paid all of that and sits blocked in `recv` on a socketpair to the supervisor (no
CPU). Protocol over that socketpair, one byte each way::

    standby -> supervisor  b"R"   models loaded, ready to take over
    supervisor -> standby  b"G"   take over: attach to the stage's rings and run
    supervisor closes      EOF    no longer needed: exit 0

The standby attaches to the rings only after b"G": ring ends read their resume point
(head, tail, records owed) from the ring's control block when they are opened, so
attaching after the dead process is gone resumes exactly where it stopped, as a cold
restart does. Standbys load at `PipelineConfig.standby_nice` so they take little CPU
from live turns; a promoted one returns to the supervisor's priority, which needs
CAP_SYS_NICE or an RLIMIT_NICE allowance: without either they are not niced at all (a
promoted stage stuck at nice 19 would be worse than a slower standby load).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import subprocess
import time
from dataclasses import dataclass

from voxrelay.ipc.channel import Sender
from voxrelay.ipc.records import RecordKind
from voxrelay.pipeline.stage_process import StageProcess

log = logging.getLogger("voxrelay.supervisor")
READY, TAKE_OVER = b"R", b"G"
CAP_SYS_NICE = 23


def can_restore_priority() -> bool:
    """Whether a process of ours may lower its nice value back to ours once raised."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    if soft == resource.RLIM_INFINITY or soft >= 20 - base:
        return True
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_NICE & 1)
    return False


def set_priority(pid: int, nice: int) -> None:
    """Every thread of `pid` to `nice`: Linux keeps a nice value per thread, and the
    pools a model load starts inherit the niceness of the thread that made them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)


@dataclass(slots=True)
class Standby:
    stage: str
    process: subprocess.Popen[bytes]
    link: socket.socket  # the supervisor's end of the socketpair
    spawned_ns: int
    ready_ns: int = 0


class StandbyPool:
    """The supervisor's standbys, at most one per stage."""

    def __init__(self, nice: int, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._base_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self._nice = nice if nice and can_restore_priority() else 0
        if nice and not self._nice:
            log.info("standbys load at normal priority: no right to restore a nice value")
        self.standbys: dict[str, Standby] = {}

    def spawn(self, stage: StageProcess, log_path: str) -> None:
        """A new standby for `stage`, loading in the background."""
        assert stage.name not in self.standbys
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        theirs.set_inheritable(True)
        try:
            args = (f"--standby={theirs.fileno()}", f"--standby-nice={self._nice}")
            process = stage.popen(log_path, args, (theirs.fileno(),))
        finally:
            theirs.close()
        standby = Standby(stage.name, process, ours, time.perf_counter_ns())
        self.standbys[stage.name] = standby
        self._loop.add_reader(ours.fileno(), self._on_message, standby)

    def _on_message(self, standby: Standby) -> None:
        try:
            message = standby.link.recv(1)
        except BlockingIOError:
            return
        except OSError:
            message = b""
        if message == READY:
            standby.ready_ns = time.perf_counter_ns()
            log.info(
                "%s standby ready after %.1f s (pid %d)",
                standby.stage,
                (standby.ready_ns - standby.spawned_ns) / 1e9,
                standby.process.pid,
            )
            return
        # EOF: it died while loading or waiting. The next restart of its stage is a cold
        # one and spawns a new standby; respawning here could loop on a broken model.
        self._forget(standby)
        code = standby.process.wait()
        log.warning(
            "%s standby exited (code %s); none until its stage restarts", standby.stage, code
        )

    def _forget(self, standby: Standby) -> None:
        self._loop.remove_reader(standby.link.fileno())
        standby.link.close()
        del self.standbys[standby.stage]

    def promote(self, name: str) -> subprocess.Popen[bytes] | None:
        """Tell `name`'s standby to take over; its process, or None if there is none
        alive. One still loading is promoted too: it is ahead of a cold start."""
        standby = self.standbys.get(name)
        if standby is None:
            return None
        try:
            standby.link.send(TAKE_OVER)
            sent = True
        except OSError:  # its end is closed: it is dead or dying
            sent = False
        self._forget(standby)
        if not sent or standby.process.poll() is not None:
            standby.process.kill()
            standby.process.wait()
            return None
        if self._nice:  # it does this itself after b"G" too, for threads made meanwhile
            set_priority(standby.process.pid, self._base_nice)
        return standby.process

    def is_ready(self, name: str) -> bool:
        standby = self.standbys.get(name)
        return standby is not None and standby.ready_ns != 0

    async def close(self) -> None:
        """Standbys waiting exit on EOF; ones still loading are terminated (their load
        may take seconds more)."""
        standbys = list(self.standbys.values())
        for standby in standbys:
            self._forget(standby)
            if not standby.ready_ns:
                standby.process.terminate()
        deadline = time.monotonic() + 5.0
        for standby in standbys:
            while standby.process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if standby.process.poll() is None:
                standby.process.kill()
                standby.process.wait()


class LateSender:
    """A standby's handler is built before it may touch the rings: its senders point
    at the real ring ends from the take-over on. Sending before then is a bug."""

    def __init__(self) -> None:
        self.target: Sender | None = None

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
        assert self.target is not None, "a standby sent a record before taking over"
        return self.target.send(
            kind,
            *parts,
            session_id=session_id,
            turn_id=turn_id,
            stamp_ns=stamp_ns,
            origin_ns=origin_ns,
            flags=flags,
            block=block,
            timeout_s=timeout_s,
        )

    def close(self) -> None:
        if self.target is not None:
            self.target.close()


def lower_own_priority(nice: int) -> int:
    """Standby side, first thing: raise our nice value; returns the one to go back to."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if nice:
        os.nice(nice)
    return base


def wait_for_take_over(link_fd: int, base_nice: int) -> bool:
    """Standby side, models loaded: say so, then block until told to take over (True)
    or to go away (False, the supervisor closed its end)."""
    with socket.socket(fileno=link_fd) as link:
        with contextlib.suppress(OSError):  # promoted while loading: its end is closed
            link.sendall(READY)
        message = link.recv(1)
    if message != TAKE_OVER:
        return False
    set_priority(os.getpid(), base_nice)  # a no-op when it was never niced
    return True
