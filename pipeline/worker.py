"""The loop every stage process runs, and the process entry point.

`python -m voxrelay.pipeline.worker STAGE --input SPEC --output SPEC --control SPEC --events SPEC
--status FD --config JSON`. The parent passes ring fds with `pass_fds`; the JSON config
is control plane (read once at start), never data.

Loop: control records first (they carry priority: a new turn cancels work), then data
records, then one unit of the handler's own work (a decode step, a synthesis), and a
poll when idle. The loop beats the status block every iteration so the supervisor can
tell a stuck process from a busy one.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Protocol

import zmq

from voxrelay.ipc.channel import ChannelSpec, Receiver, Sender, open_receiver, open_sender
from voxrelay.ipc.records import CONTROL_BODY, STAMP_BODY, ControlOp, Record, RecordKind, Stamp
from voxrelay.pipeline.openmp import prefer_passive_openmp
from voxrelay.pipeline.standby import LateSender, lower_own_priority, wait_for_take_over
from voxrelay.pipeline.status import StageStatus

IDLE_POLL_MS = 100
PR_SET_PDEATHSIG = 1
BEAT_INTERVAL_S = 0.1
# One loop iteration (a Whisper decode, a prefill, a synthesis) never legitimately takes
# this long; a loop that has not come round in this time is stuck.
STALL_LIMIT_NS = 30_000_000_000


class Heartbeat(threading.Thread):
    """Beats the status block from its own thread while the main loop makes progress.

    A thread, because a single decode may hold the loop for most of a second on 2 cores,
    and the supervisor should still tell a stopped process (SIGSTOP, a frozen host: no
    thread runs) from a busy one within about a second. A loop that stops coming round
    for STALL_LIMIT_NS silences the beat too.
    """

    def __init__(self, status: StageStatus) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.status = status
        self.progress_ns = time.perf_counter_ns()

    def run(self) -> None:
        while True:
            if time.perf_counter_ns() - self.progress_ns < STALL_LIMIT_NS:
                self.status.beat()
            time.sleep(BEAT_INTERVAL_S)


class Events:
    """Stage -> supervisor: trace stamps and errors (their own sink, not the data path),
    and the LLM's COMMIT where it may overtake the data path (llm/worker.py)."""

    def __init__(self, sender: Sender) -> None:
        self._sender = sender

    def stamp(
        self,
        session_id: int,
        turn_id: int,
        point: Stamp,
        value: int = 0,
        text: str | bytes = "",
        at_ns: int | None = None,
    ) -> None:
        self._sender.send(
            RecordKind.STAMP,
            STAMP_BODY.pack(point, value),
            text.encode() if isinstance(text, str) else text,
            session_id=session_id,
            turn_id=turn_id,
            stamp_ns=at_ns,
            timeout_s=2.0,
        )

    def commit(self, session_id: int, turn_id: int, origin_ns: int) -> None:
        self._sender.send(
            RecordKind.COMMIT,
            session_id=session_id,
            turn_id=turn_id,
            origin_ns=origin_ns,
            timeout_s=2.0,
        )

    def error(self, session_id: int, turn_id: int, message: str) -> None:
        self._sender.send(
            RecordKind.ERROR,
            message.encode()[:4000],
            session_id=session_id,
            turn_id=turn_id,
            timeout_s=2.0,
        )


class TableHandler:
    """Base of the stage handlers: dispatch on a record's kind through a table; kinds
    a stage does not take are ignored."""

    _dispatch: dict[RecordKind, Callable[[Record], None]]

    def handle(self, record: Record) -> None:
        handler = self._dispatch.get(record.kind)
        if handler is not None:
            handler(record)


class Handler(Protocol):
    def handle(self, record: Record) -> None: ...

    def step(self) -> bool:
        """Do one unit of pending work; True while more is pending."""
        ...


HandlerFactory = Callable[[dict[str, object], Sender, Events], Handler]


# Controls sent on the ASR's audio ring with the session's audio, before the ASR has
# numbered their turn: a typed turn's, the agent's, the first utterance's number.
UNNUMBERED_CONTROLS = frozenset({ControlOp.TURN_BASE, ControlOp.TEXT_TURN, ControlOp.AGENT_TURN})


class TurnGate:
    """Drops data records of closed sessions and of turns a NEW_TURN has superseded.

    Every stage runs the same gate before its handler, so a record that was already in
    a ring when the turn ended (barge-in, a failed turn, a hang-up) does no work anywhere.
    Session ids are never reused, so remembering the closed ones is enough.
    """

    MAX_CLOSED = 65_536

    def __init__(self) -> None:
        self.min_turn: dict[int, int] = {}
        self.closed: set[int] = set()

    def control(self, record: Record) -> None:
        op, _ = CONTROL_BODY.unpack_from(record.payload)
        if op == ControlOp.NEW_TURN:
            current = self.min_turn.get(record.session_id, 0)
            self.min_turn[record.session_id] = max(current, record.turn_id)
        elif op == ControlOp.SESSION_CLOSE:
            self.min_turn.pop(record.session_id, None)
            if len(self.closed) >= self.MAX_CLOSED:
                self.closed.clear()  # ids only grow: old ones never come back
            self.closed.add(record.session_id)

    def admits(self, record: Record) -> bool:
        if record.session_id in self.closed:
            return False
        # Audio carries no turn id yet (ASR assigns turns), nor do the controls that ask the
        # ASR to number one (a typed turn, the agent's); only later kinds are gated.
        if record.kind in (RecordKind.AUDIO_IN, RecordKind.END_OF_INPUT):
            return True
        if record.kind == RecordKind.CONTROL:
            op, _ = CONTROL_BODY.unpack_from(record.payload)
            if op in UNNUMBERED_CONTROLS:
                return True
        return record.turn_id >= self.min_turn.get(record.session_id, 0)


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when the supervisor dies: no stray processes."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(1)


def run_loop(
    handler: Handler,
    data_in: Receiver,
    control: Receiver,
    events: Events,
    status: StageStatus,
    parent_pid: int,
) -> None:
    poller = zmq.Poller()
    poller.register(control.pollable(), zmq.POLLIN)
    poller.register(data_in.pollable(), zmq.POLLIN)
    parent_fd = os.pidfd_open(parent_pid)
    poller.register(parent_fd, zmq.POLLIN)
    gate = TurnGate()
    heartbeat = Heartbeat(status)
    heartbeat.start()
    busy = False
    while True:
        heartbeat.progress_ns = time.perf_counter_ns()
        timeout_ms = 0 if busy else IDLE_POLL_MS
        ready = dict(poller.poll(timeout_ms))
        if parent_fd in ready:
            return
        while (record := control.recv()) is not None:
            if record.kind == RecordKind.CONTROL:
                if _is_shutdown(record):
                    return
                gate.control(record)
            handler.handle(record)
        # Bounded batch so control is looked at again soon even under a flood of audio.
        for _ in range(64):
            record = data_in.recv()
            if record is None:
                break
            if not gate.admits(record):
                continue
            try:
                handler.handle(record)
            except ValueError as exc:  # bad input from a client: report, keep serving
                events.error(record.session_id, record.turn_id, str(exc))
        busy = handler.step()


def _is_shutdown(record: Record) -> bool:
    op, _ = CONTROL_BODY.unpack_from(record.payload)
    return bool(op == ControlOp.SHUTDOWN)


def _factories() -> dict[str, HandlerFactory]:
    # Imported lazily: each process loads only its own stage's libraries.
    def asr(config: dict[str, object], out: Sender, events: Events) -> Handler:
        from voxrelay.asr.worker import ASRHandler

        handler: Handler = ASRHandler(config, out, events)
        return handler

    def llm(config: dict[str, object], out: Sender, events: Events) -> Handler:
        from voxrelay.llm.worker import LLMHandler

        handler: Handler = LLMHandler(config, out, events)
        return handler

    def tts(config: dict[str, object], out: Sender, events: Events) -> Handler:
        from voxrelay.tts.worker import TTSHandler

        handler: Handler = TTSHandler(config, out, events)
        return handler

    return {"asr": asr, "llm": llm, "tts": tts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voxrelay-stage")
    parser.add_argument("stage", choices=sorted(_factories()))
    for name in ("input", "output", "control", "events"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--status", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--config", default="{}")
    parser.add_argument("--standby", type=int, default=-1, help="take-over socket fd")
    parser.add_argument("--standby-nice", type=int, default=0)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent)
    standby = args.standby >= 0
    base_nice = lower_own_priority(args.standby_nice if standby else 0)
    # Into the stage's log file (its stderr, shared with its standby: hence the pid);
    # VOXRELAY_LOG_LEVEL=DEBUG shows, e.g., each LLM request's dialogue history.
    logging.basicConfig(
        level=os.environ.get("VOXRELAY_LOG_LEVEL", "WARNING").upper(),
        format=f"%(asctime)s {args.stage} %(process)d %(name)s %(levelname)s %(message)s",
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
    stage_config = json.loads(args.config)
    # Before the handler loads its model runtime, which reads the policy once.
    prefer_passive_openmp(int(stage_config.get("openmp_spin", 0)))
    out, events_out = LateSender(), LateSender()
    events = Events(events_out)
    if not standby:  # a load error goes out on the events ring
        data_in, control, status = _attach(args, out, events_out)
    try:
        handler = _factories()[args.stage](stage_config, out, events)
    except Exception as exc:  # a model that fails to load: say why, exit non-zero
        if not standby:
            events.error(0, 0, f"{args.stage} stage failed to start: {exc}")
        traceback.print_exc()
        return 2
    if standby:
        if not wait_for_take_over(args.standby, base_nice):
            return 0
        data_in, control, status = _attach(args, out, events_out)
    status.mark_ready(time.perf_counter_ns())
    run_loop(handler, data_in, control, events, status, args.parent)
    return 0


def _attach(
    args: argparse.Namespace, out: LateSender, events_out: LateSender
) -> tuple[Receiver, Receiver, StageStatus]:
    """Open this stage's ends of its rings; each end resumes from the ring's control
    block, wherever the stage's previous process left it."""
    events_out.target = open_sender(ChannelSpec.parse(args.events))
    out.target = open_sender(ChannelSpec.parse(args.output))
    data_in = open_receiver(ChannelSpec.parse(args.input))
    control = open_receiver(ChannelSpec.parse(args.control))
    return data_in, control, StageStatus.attach(args.status)


if __name__ == "__main__":
    sys.exit(main())
