"""Starts the ASR, LLM and TTS processes, wires their channels, restarts the dead.

Topology (each arrow is one channel; `=` links follow `PipelineConfig.transport`)::

    supervisor --audio--> ASR ==text==> LLM ==tokens==> TTS --audio--> supervisor
    supervisor --control--> each stage;  each stage --events--> supervisor

The supervisor keeps every shared-memory fd open, so a restarted stage attaches to
the same rings and its neighbours never notice. It runs on an asyncio loop: ring
doorbells and child pidfds are plain fds for `loop.add_reader`, so one thread routes
everything and no lock is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable

from voxrelay.ipc.channel import make_channel
from voxrelay.ipc.records import CONTROL_BODY, ControlOp, Record, RecordKind
from voxrelay.ipc.ring import Consumer, Producer, RingCorrupt, dropped_records
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.stage_process import StageLogs, StageProcess
from voxrelay.pipeline.standby import StandbyPool
from voxrelay.pipeline.status import StageStatus

log = logging.getLogger("voxrelay.supervisor")
STAGES = ("asr", "llm", "tts")
# Consecutive watchdog checks that must find a stage's heartbeat stale before it is killed.
STALE_CHECKS_TO_KILL = 2
RecordCallback = Callable[[str, Record], None]
# Records on the audio ring that end something a session writes down (a turn's row, a
# reply held until its commit, the session): the stamps that go with them come on the
# events rings, written before these left their stage, so those rings are read first.
LAST_WORDS = frozenset({RecordKind.AUDIO_END, RecordKind.COMMIT, RecordKind.END_OF_INPUT})


class StageFailed(RuntimeError):
    """A stage could not start, or died more often than the restart budget allows."""


class Supervisor:
    """Owns the stage processes. `on_record(stage, record)` receives every record that
    reaches the supervisor: reply audio from TTS and events from all three stages."""

    def __init__(self, config: PipelineConfig, on_record: RecordCallback) -> None:
        self.config = config
        self._on_record = on_record
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stages: dict[str, StageProcess] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._standbys: StandbyPool | None = None  # with config.warm_standby, once started
        self._closing = False
        self.on_restart: Callable[[str, str], None] = lambda stage, why: None
        self.logs = StageLogs()
        self.crashed = False  # a stage exited or was killed: its logs are kept
        self.malformed_records: dict[str, int] = dict.fromkeys(STAGES, 0)
        audio_in = make_channel("shm", config.audio_ring_bytes)
        asr_llm = make_channel(config.transport, config.token_ring_bytes)
        llm_tts = make_channel(config.transport, config.token_ring_bytes)
        audio_out = make_channel("shm", config.audio_ring_bytes)
        self._links = {
            "asr": (audio_in, asr_llm),
            "llm": (asr_llm, llm_tts),
            "tts": (llm_tts, audio_out),
        }
        assert audio_in.ring is not None and audio_out.ring is not None
        self.audio_in = Producer(audio_in.ring)
        self.audio_out = Consumer(audio_out.ring)
        self._channel_specs = [audio_in, asr_llm, llm_tts, audio_out]
        self._ring_names = ("audio_in", "asr_llm", "llm_tts", "audio_out")

    def stage_configs(self) -> dict[str, dict[str, object]]:
        return self.config.stage_configs()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for name, stage_config in self.stage_configs().items():
            control = make_channel("shm", self.config.control_ring_bytes)
            events = make_channel("shm", self.config.token_ring_bytes)
            assert control.ring is not None and events.ring is not None
            data_in, data_out = self._links[name]
            specs = {"input": data_in, "output": data_out, "control": control, "events": events}
            self._stages[name] = StageProcess(
                name,
                specs,
                StageStatus.create(name),
                Producer(control.ring),
                Consumer(events.ring),
                stage_config,
            )
        self._loop.add_reader(self.audio_out.fileno(), self._drain, "tts", self.audio_out)
        for stage in self._stages.values():
            self._loop.add_reader(stage.events.fileno(), self._drain, stage.name, stage.events)
            self._spawn(stage)
        await asyncio.gather(*(self._wait_ready(s) for s in self._stages.values()))
        self._watchdog = asyncio.create_task(self._watch_heartbeats())
        if self.config.warm_standby:
            # Only now: their model loads (niced) would otherwise slow the stages' own.
            self._standbys = StandbyPool(self.config.standby_nice, self._loop)
            for stage in self._stages.values():
                self._standbys.spawn(stage, stage.stderr_path)

    def _spawn(self, stage: StageProcess) -> None:
        stage.status.reset()
        stage.process = stage.popen(stage.stderr_path or self.logs.path(stage.name))
        self._watch(stage)

    def _watch(self, stage: StageProcess) -> None:
        assert self._loop is not None and stage.process is not None
        stage.started_ns = time.perf_counter_ns()
        stage.pidfd = os.pidfd_open(stage.process.pid)
        self._loop.add_reader(stage.pidfd, self._on_exit, stage)

    async def _wait_ready(self, stage: StageProcess) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        while stage.status.ready_ns == 0:
            assert stage.process is not None
            if stage.process.poll() is not None:
                self.crashed = True
                raise StageFailed(f"{stage.name} stage exited while starting: {stage.log_tail()}")
            if time.monotonic() > deadline:
                self.crashed = True
                raise StageFailed(
                    f"{stage.name} stage did not start within "
                    f"{self.config.start_timeout_s:.0f} s: {stage.log_tail()}"
                )
            await asyncio.sleep(0.02)

    def drain_events(self, stages: tuple[str, ...] = STAGES) -> None:
        """Deliver what every stage (of `stages`) has already written to its events ring.

        A stage writes a turn's stamps (the reply's text, say) before the records they go
        with leave it on the data path, but the supervisor reads its rings in any order:
        a record of `LAST_WORDS` from the audio ring is delivered after this, or a stamp
        written before it could still be waiting in its ring (seen: a row without its
        reply_text, the COMMIT after a retraction having released the turn's AUDIO_END)."""
        for stage in self._stages.values():
            if stage.name in stages:
                self._drain(stage.name, stage.events)

    def _drain(self, stage_name: str, consumer: Consumer) -> None:
        # A stage that writes garbage (a bug, memory corruption) must not take the
        # supervisor down: a record that does not parse is dropped and counted; a ring
        # whose framing is lost gets its stage restarted and is skipped past.
        while True:
            try:
                record = consumer.recv()
            except RingCorrupt as exc:
                self._on_corrupt(stage_name, consumer, str(exc))
                return
            except ValueError as exc:  # a record of unknown kind, already skipped
                self._malformed(stage_name, str(exc))
                continue
            if record is None:
                return
            if consumer is self.audio_out and record.kind in LAST_WORDS:
                self.drain_events()
            elif record.kind == RecordKind.COMMIT and stage_name == "llm":
                # A COMMIT on the LLM's events ring releases the turn's audio: what the ASR
                # wrote before the FINAL it answers (the transcript) is delivered first.
                self.drain_events(("asr",))
            try:
                self._on_record(stage_name, record)
            except (ValueError, struct.error) as exc:
                self._malformed(stage_name, f"{record.kind.name} record: {exc}")

    def _malformed(self, stage_name: str, why: str) -> None:
        self.malformed_records[stage_name] += 1
        log.error("malformed record from the %s stage dropped: %s", stage_name, why)

    def _on_corrupt(self, stage_name: str, consumer: Consumer, why: str) -> None:
        stage = self._stages.get(stage_name)
        if stage is None or consumer in stage.corrupt:
            return  # already seen: the ring stays stuck until the restart skips it
        self.malformed_records[stage_name] += 1
        log.error("%s stage corrupted its ring (%s); restarting it", stage_name, why)
        stage.corrupt.append(consumer)
        if stage.process is not None and stage.process.poll() is None:
            stage.process.kill()  # _on_exit restarts it, after the ring is skipped

    def _on_exit(self, stage: StageProcess) -> None:
        assert self._loop is not None and stage.process is not None
        self._loop.remove_reader(stage.pidfd)
        os.close(stage.pidfd)
        code = stage.process.wait()
        if self._closing:
            return
        self._restart(stage, f"{stage.name} stage process exited with code {code}")

    def _restart(self, stage: StageProcess, why: str) -> None:
        self.crashed = True
        log.warning("%s; restarting it (its log: %s)", why, stage.stderr_path)
        # Events it wrote before dying are still in its ring: deliver them first.
        self._drain(stage.name, stage.events)
        if stage.name == "tts":
            self._drain("tts", self.audio_out)
        for consumer in stage.corrupt:
            consumer.resync()
        stage.corrupt.clear()
        stage.restarts += 1
        stage.status.reset()  # not ready while down (/metrics' voxrelay_stage_ready, is_ready)
        if stage.restarts > self.config.max_restarts:
            log.error("%s stage exceeded %d restarts", stage.name, self.config.max_restarts)
            self.on_restart(stage.name, why + "; restart budget exhausted")
            return
        self.on_restart(stage.name, why)
        # Reset above, before the standby hears b"G": it marks ready at once.
        promoted = self._standbys.promote(stage.name) if self._standbys else None
        if promoted is None:
            self._spawn(stage)
        else:
            stage.process = promoted
            self._watch(stage)
            log.warning("%s standby (pid %d) took over", stage.name, promoted.pid)
        if self._standbys is not None:
            self._standbys.spawn(stage, stage.stderr_path)  # for the next failure

    async def _watch_heartbeats(self) -> None:
        timeout_ns = int(self.config.heartbeat_timeout_s * 1e9)
        # Cheap (two words read per stage), so often: a stop is seen within two intervals.
        interval_s = min(0.1, self.config.heartbeat_timeout_s / 8)
        while not self._closing:
            await asyncio.sleep(interval_s)
            now = time.perf_counter_ns()
            for stage in self._stages.values():
                # A stage marks itself ready just before its heartbeat thread starts: under
                # load the first beat can come late, and a beat of 0 is not a stale one.
                beat = max(stage.status.heartbeat_ns, stage.status.ready_ns)
                alive = stage.process is not None and stage.process.poll() is None
                stale = bool(stage.status.ready_ns) and now - beat > timeout_ns and alive
                stage.stale_checks = stage.stale_checks + 1 if stale else 0
                # Twice in a row, so one bad read never kills a working stage (the soak
                # once did: pipeline/status.py); it costs one interval of detection time.
                if stage.stale_checks >= STALE_CHECKS_TO_KILL:
                    assert stage.process is not None
                    log.warning(
                        "%s stage missed heartbeats for %.1f s; killing it "
                        "(heartbeat_ns %d, ready_ns %d, now %d, pid %d)",
                        stage.name,
                        (now - beat) / 1e9,
                        stage.status.heartbeat_ns,
                        stage.status.ready_ns,
                        now,
                        stage.process.pid,
                    )
                    stage.stale_checks = 0
                    stage.process.kill()  # _on_exit restarts it
                    stage.status.reset()

    def stage_pid(self, name: str) -> int:
        process = self._stages[name].process
        assert process is not None
        return process.pid

    def restarts(self, name: str) -> int:
        return self._stages[name].restarts

    def is_ready(self, name: str) -> bool:
        """Whether `name` has loaded its models and its process is running (a dead one
        reads not ready even before its exit is handled)."""
        stage = self._stages[name]
        alive = stage.process is not None and stage.process.poll() is None
        return alive and stage.status.ready_ns != 0

    def standby_ready(self, name: str) -> bool:
        """Whether `name` has a standby with its models loaded (warm_standby only)."""
        return self._standbys is not None and self._standbys.is_ready(name)

    def standby_pid(self, name: str) -> int | None:
        standby = self._standbys.standbys.get(name) if self._standbys else None
        return standby.process.pid if standby else None

    def ring_drops(self) -> dict[str, int]:
        """Records dropped by each shared-memory ring's producer because it was full."""
        rings = {
            name: spec.ring
            for name, spec in zip(self._ring_names, self._channel_specs, strict=True)
            if spec.ring is not None
        }
        for stage in self._stages.values():
            for key in ("control", "events"):
                ring = stage.specs[key].ring
                if ring is not None:
                    rings[f"{stage.name}_{key}"] = ring
        return {name: dropped_records(ring) for name, ring in rings.items()}

    def control(
        self,
        op: ControlOp,
        argument: int = 0,
        session_id: int = 0,
        turn_id: int = 0,
        stages: tuple[str, ...] = STAGES,
        text: bytes = b"",
        block: bool = True,
    ) -> None:
        """`block=False`: a hint, dropped where a stage's control ring is full."""
        for name in stages:
            self._stages[name].control.send(
                RecordKind.CONTROL,
                CONTROL_BODY.pack(op, argument),
                text,
                session_id=session_id,
                turn_id=turn_id,
                block=block,
                timeout_s=0.5,
            )

    async def stop(self) -> None:
        self._closing = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._standbys is not None:
            await self._standbys.close()
        for stage in self._stages.values():
            if stage.process and stage.process.poll() is None:
                try:
                    stage.control.send(
                        RecordKind.CONTROL, CONTROL_BODY.pack(ControlOp.SHUTDOWN, 0), timeout_s=0.2
                    )
                except TimeoutError:
                    stage.process.kill()
        deadline = time.monotonic() + 5.0
        for stage in self._stages.values():
            while stage.process and stage.process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if stage.process and stage.process.poll() is None:
                stage.process.kill()
                stage.process.wait()
        assert self._loop is not None
        self._loop.remove_reader(self.audio_out.fileno())
        for stage in self._stages.values():
            self._loop.remove_reader(stage.events.fileno())
            if stage.pidfd >= 0:
                self._loop.remove_reader(stage.pidfd)
                with contextlib.suppress(OSError):
                    os.close(stage.pidfd)
            stage.control.close()
            stage.events.close()
            stage.status.close()
            for key in ("control", "events"):
                ring = stage.specs[key].ring
                if ring is not None:
                    ring.close()
        self.audio_in.close()
        self.audio_out.close()
        for spec in self._channel_specs:
            if spec.ring is not None:
                spec.ring.close()
        self.logs.finish(self.crashed)

    @property
    def log_dir(self) -> str:
        return self.logs.directory
