"""One thread owns the engine and steps it; asyncio request handlers feed it.

The engine is not thread-safe and needs no lock this way: `add_request` and `abort`
travel to the engine thread as commands, run between two steps, and each step's tokens
travel back to the requesting coroutine's queue on its event loop. Every request that
is running when a step starts shares that forward pass: continuous batching across
HTTP clients comes from the engine's scheduler, not from the server.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.sequence import TokenOutput

log = logging.getLogger(__name__)

# What a request's queue receives: tokens, or the error that ended it (a ValueError from
# add_request before any token; a RuntimeError if the engine itself failed).
StreamItem = TokenOutput | ValueError | RuntimeError


@dataclass(slots=True)
class EngineStats:
    steps: int = 0
    max_batch: int = 0  # most requests that got a token from one forward pass


class EngineThread:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.stats = EngineStats()
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._running = True
        # Request id -> (its event loop, its queue); engine thread only.
        self._streams: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue[StreamItem]]] = {}
        self._ids = itertools.count(1)
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
        self._thread.start()

    @property
    def num_active(self) -> int:
        return len(self._streams)

    def submit(
        self, prompt_ids: list[int], max_new_tokens: int, top_logprobs: int | None = None
    ) -> tuple[int, asyncio.Queue[StreamItem]]:
        """Queue a request from a coroutine; its tokens arrive on the returned queue
        (with their log-probabilities where `top_logprobs` is set, LLMEngine.add_request)."""
        request_id = next(self._ids)
        stream: asyncio.Queue[StreamItem] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def add() -> None:
            try:
                self.engine.add_request(
                    request_id, prompt_ids, max_new_tokens, top_logprobs=top_logprobs
                )
            except ValueError as exc:
                loop.call_soon_threadsafe(stream.put_nowait, exc)
                return
            self._streams[request_id] = (loop, stream)

        self._commands.put(add)
        return request_id, stream

    def abort(self, request_id: int) -> None:
        def abort() -> None:
            self.engine.abort(request_id)
            self._streams.pop(request_id, None)

        self._commands.put(abort)

    def close(self) -> None:
        def stop() -> None:
            self._running = False

        self._commands.put(stop)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        engine = self.engine
        while self._running:
            if not engine.has_pending_work():
                self._commands.get()()  # idle: sleep until a request or an abort comes
            while not self._commands.empty():  # between two steps: whatever has arrived
                self._commands.get_nowait()()
            if not self._running or not engine.has_pending_work():
                continue
            try:
                outputs = engine.step()
            except Exception as exc:  # fail the requests in flight, keep serving
                log.exception("engine step failed")
                self._fail_all(RuntimeError(f"the engine failed: {exc}"))
                continue
            self.stats.steps += 1
            self.stats.max_batch = max(self.stats.max_batch, len(outputs))
            for output in outputs:
                entry = self._streams.get(output.request_id)
                if entry is None:
                    continue
                loop, stream = entry
                if output.finished:
                    del self._streams[output.request_id]
                loop.call_soon_threadsafe(stream.put_nowait, output)

    def _fail_all(self, error: RuntimeError) -> None:
        for request_id, (loop, stream) in self._streams.items():
            self.engine.abort(request_id)
            loop.call_soon_threadsafe(stream.put_nowait, error)
        self._streams.clear()
