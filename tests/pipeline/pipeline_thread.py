"""One real Pipeline on its own event loop in a daemon thread, shared by a test module."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Coroutine
from typing import Any

import psutil

from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.supervisor import STAGES, Supervisor


class PipelineThread:
    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.pipeline: Pipeline
        self.loop: asyncio.AbstractEventLoop
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.ready.wait(300):
            raise TimeoutError("the pipeline did not start")
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced to the test
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with Pipeline(self.config) as pipeline:
            self.pipeline = pipeline
            self.ready.set()
            await self._stop.wait()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(60)
        assert not self.thread.is_alive(), "the pipeline did not stop"


def stage_children(supervisor: Supervisor) -> dict[str, psutil.Process]:
    """This process's stage processes by stage name, standbys as '<stage>-standby' (a
    promoted standby keeps its command line, so the supervisor says which is which);
    any other child (a stray, a zombie) counts under its pid."""
    roles = {}
    for stage in STAGES:
        roles[supervisor.stage_pid(stage)] = stage
        standby = supervisor.standby_pid(stage)
        if standby is not None:
            roles[standby] = f"{stage}-standby"
    return {
        roles.get(child.pid, f"other-{child.pid}"): child for child in psutil.Process().children()
    }


def wait_standbys(supervisor: Supervisor, timeout_s: float = 180.0) -> None:
    """Until every stage has a loaded standby (warm_standby only). They load at nice 19,
    so on the busy 2-core box this may take a while."""
    if not supervisor.config.warm_standby:
        return
    deadline = time.monotonic() + timeout_s
    while not all(supervisor.standby_ready(stage) for stage in STAGES):
        assert time.monotonic() < deadline, "the standbys did not load"
        time.sleep(0.05)


def fd_census(pid: int | str = "self") -> tuple[int, int]:
    """(open fds, of which memfds) of a process."""
    fds = memfds = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:  # the listing's own fd, closed meanwhile
            continue
        fds += 1
        memfds += target.startswith("/memfd:")
    return fds, memfds


class NullSink:
    """A session sink that discards everything (tests that only look at traces/rings)."""

    def on_audio(self, turn_id, pcm16, sample_rate):
        pass

    def on_text(self, turn_id, kind, text):
        pass

    def on_error(self, turn_id, message):
        pass

    def on_audio_end(self, turn_id):
        pass

    def on_turn_done(self, trace):
        pass

    def on_input_end(self, lost: bool) -> None:
        pass
