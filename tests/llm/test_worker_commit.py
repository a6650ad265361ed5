"""Which way a COMMIT leaves the LLM stage: straight to the supervisor when nothing of the
turn was retracted, behind the data path when a retracted reply's audio may still be on
its way (it must reach the sink, and be dropped, before the commit admits the turn)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.llm.stage import FakeSender, native_handler
from voxrelay.ipc.records import FINAL_INFO, Record, RecordKind, Stamp
from voxrelay.llm.worker import LLMHandler


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
    yield from native_handler(model_path, 4, CommitEvents())


def _turn(handler: LLMHandler, turn: int, *records: tuple[RecordKind, str]) -> list[RecordKind]:
    """Feed one turn's ASR records (a step after each); the kinds sent on the data path."""
    out = FakeSender()
    handler.out = out
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


class Log:
    """The stage's data path and events ring as one sequence, in the order written."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def send(self, kind: RecordKind, *parts: bytes, **_: Any) -> bool:
        self.entries.append(kind.name)
        return True

    def stamp(self, session_id: int, turn_id: int, point: Stamp, *_: Any, **__: Any) -> None:
        self.entries.append(point.name)

    def commit(self, *args: Any) -> None:
        self.entries.append("events COMMIT")

    def error(self, *args: Any) -> None:
        raise AssertionError(f"stage error: {args}")


def test_reply_text_is_written_before_the_record_that_ends_the_turn(model_path: Path) -> None:
    """The supervisor reads the events rings before an AUDIO_END or COMMIT from the audio
    ring (pipeline.supervisor.LAST_WORDS); that holds the reply's text only if the LLM
    wrote it before the record that lets the turn end left on the data path. Seen in CI:
    a reply that ended while speculative, committed after a retraction, lost its text."""
    settings = {"model_path": str(model_path), "device": "cpu", "num_threads": 2,
                "max_new_tokens": 4}  # fmt: skip
    log = Log()
    handler = LLMHandler(settings, log, log)  # type: ignore[arg-type]
    try:

        def feed(turn: int, kind: RecordKind, text: str) -> None:
            info = FINAL_INFO.pack(5.0) if kind == RecordKind.FINAL else b""
            handler.handle(Record(kind, 0, 1, turn, 0, 0, info + text.encode()))

        def settle() -> None:
            while handler.step():
                pass

        # After a retraction, the second attempt ends before the final transcript.
        feed(1, RecordKind.SPECULATIVE_END, "Tell me")
        feed(1, RecordKind.RESUME, "")
        feed(1, RecordKind.SPECULATIVE_END, "Tell me a joke.")
        settle()
        assert "REPLY_END" in log.entries and "REPLY_TEXT" not in log.entries, log.entries
        feed(1, RecordKind.FINAL, "Tell me a joke.")
        settle()
        assert log.entries.index("REPLY_TEXT") < log.entries.index("COMMIT"), log.entries

        # A committed reply: its text before its REPLY_END.
        log.entries.clear()
        feed(2, RecordKind.FINAL, "Hello there.")
        settle()
        assert log.entries.index("REPLY_TEXT") < log.entries.index("REPLY_END"), log.entries
    finally:
        handler.backend.close()
