"""Which way a COMMIT leaves the LLM stage: straight to the supervisor when nothing of the
turn was retracted, behind the data path when a retracted reply's audio may still be on
its way (it must reach the sink, and be dropped, before the commit admits the turn)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ipc.records import FINAL_INFO, Record, RecordKind
from llm.worker import LLMHandler
from tests.llm.stage import FakeSender


class CommitEvents:
    def __init__(self) -> None:
        self.commits: list[tuple[int, int]] = []

    def stamp(self, *args: Any, **kwargs: Any) -> None:
        pass

    def commit(self, session_id: int, turn_id: int, origin_ns: int) -> None:
        self.commits.append((session_id, turn_id))

    def error(self, *args: Any) -> None:
        raise AssertionError(f"stage error: {args}")


@pytest.fixture(scope="module")
def handler(model_path: Path) -> Iterator[LLMHandler]:
    settings = {"model_path": str(model_path), "device": "cpu", "num_threads": 2,
                "max_new_tokens": 4}  # fmt: skip
    handler = LLMHandler(settings, FakeSender(), CommitEvents())  # type: ignore[arg-type]
    yield handler
    handler.backend.close()


def _turn(handler: LLMHandler, turn: int, *records: tuple[RecordKind, str]) -> list[RecordKind]:
    """Feed one turn's ASR records (a step after each); the kinds sent on the data path."""
    out = FakeSender()
    handler.out = out  # type: ignore[assignment]
    for kind, text in records:
        info = FINAL_INFO.pack(5.0) if kind == RecordKind.FINAL else b""
        payload = info + text.encode()
        handler.handle(Record(kind, 0, 1, turn, 0, 0, payload))
        handler.step()
    while handler.step():
        pass
    return [kind for kind, _ in out.records if kind != RecordKind.TOKEN]


def test_commit_skips_the_data_path_only_when_nothing_was_retracted(
    handler: LLMHandler,
) -> None:
    events = handler.events
    assert isinstance(events, CommitEvents)
    spec, final, resume = RecordKind.SPECULATIVE_END, RecordKind.FINAL, RecordKind.RESUME

    # The speculative reply stands: COMMIT goes straight to the supervisor.
    data = _turn(handler, 1, (spec, "Hello there."), (final, "Hello there."))
    assert events.commits == [(1, 1)] and RecordKind.COMMIT not in data, data

    # The user spoke on, then paused again: the first reply's audio may still be in TTS.
    data = _turn(handler, 2, (spec, "Tell me"), (resume, ""), (spec, "Tell me a joke."),
                 (final, "Tell me a joke."))  # fmt: skip
    assert events.commits == [(1, 1)], "a commit overtook a retracted reply's audio"
    assert data.index(RecordKind.RESUME) < data.index(RecordKind.COMMIT), data

    # The final transcript differs from the speculative one: retracted, restarted.
    data = _turn(handler, 3, (spec, "What time"), (final, "What time is it?"))
    assert events.commits == [(1, 1)]
    assert data.index(RecordKind.RESUME) < data.index(RecordKind.COMMIT), data

    # The next turn of the same session is clean again.
    data = _turn(handler, 4, (spec, "Thanks."), (final, "Thanks."))
    assert events.commits == [(1, 1), (1, 4)] and RecordKind.COMMIT not in data, data
