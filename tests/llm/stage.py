"""The LLM stage's handler driven in this process: fake rings, real engine."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voxrelay.ipc.records import TOKEN_ID, Record, RecordKind
from voxrelay.llm.worker import LLMHandler


class FakeSender:
    def __init__(self) -> None:
        self.records: list[tuple[RecordKind, bytes]] = []

    def send(self, kind: RecordKind, *parts: bytes, **_: Any) -> bool:
        self.records.append((kind, b"".join(parts)))
        return True


class FakeEvents:
    def stamp(self, *args: Any, **kwargs: Any) -> None:
        pass

    def commit(self, *args: Any) -> None:
        pass

    def error(self, *args: Any) -> None:
        raise AssertionError(f"stage error: {args}")


def native_handler(
    model_path: Path, max_new_tokens: int, events: object | None = None
) -> Iterator[LLMHandler]:
    """A module fixture's body: the stage's handler on the real GGUF (CPU, 2 threads),
    replies capped at `max_new_tokens`, its events to `events` (FakeEvents by default)."""
    settings = {"model_path": str(model_path), "device": "cpu", "num_threads": 2,
                "max_new_tokens": max_new_tokens}  # fmt: skip
    sink = FakeEvents() if events is None else events
    handler = LLMHandler(settings, FakeSender(), sink)  # type: ignore[arg-type]
    yield handler
    handler.backend.close()


def reply_text(out: FakeSender) -> str:
    """The reply text the stage sent to TTS (every TOKEN record's text, in order)."""
    return "".join(p[TOKEN_ID.size :].decode() for k, p in out.records if k == RecordKind.TOKEN)


def record(kind: RecordKind, payload: bytes) -> Record:
    return Record(kind, 0, 1, 1, 0, 0, payload)


def stage_reply(settings: dict[str, Any], turn: list[Record]) -> tuple[str, str]:
    """(reply text sent to TTS, REPLY_END reason) of the LLM stage fed `turn`, a step
    after each record; the stage has no request left when the reply ended but the
    session's next prompt."""
    out = FakeSender()
    handler = LLMHandler(settings, out, FakeEvents())  # type: ignore[arg-type]
    try:
        for each in turn:
            handler.handle(each)
            handler.step()
        deadline = time.monotonic() + 60
        while not any(kind == RecordKind.REPLY_END for kind, _ in out.records):
            assert time.monotonic() < deadline, "no REPLY_END"
            handler.step()
        while handler.step():  # the session's next prompt, opened ahead of its turn
            pass
        assert not handler.replies
        engine = getattr(handler.backend, "engine", None)
        if engine is not None:
            ahead = {p.request_id for p in handler.prompts.by_session.values()}
            assert set(engine._requests) == ahead
    finally:
        handler.backend.close()
    text = reply_text(out)
    reason = next(p.decode() for k, p in out.records if k == RecordKind.REPLY_END)
    return text, reason
