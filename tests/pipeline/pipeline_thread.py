"""One real Pipeline on its own event loop in a daemon thread, shared by a test module."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any

import psutil

from pipeline.config import PipelineConfig
from pipeline.run import Pipeline


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


def stage_children() -> dict[str, psutil.Process]:
    """This process's stage processes by stage name (zombies included: they count)."""
    found = {}
    for child in psutil.Process().children():
        try:
            cmdline = child.cmdline()
        except psutil.ZombieProcess:
            found[f"zombie-{child.pid}"] = child
            continue
        if "pipeline.worker" in cmdline:
            found[cmdline[cmdline.index("pipeline.worker") + 1]] = child
    return found


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
