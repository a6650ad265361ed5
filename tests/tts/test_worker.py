"""The TTS stage's handler driven in this process (fake rings, the real voice): a barge-in
(NEW_TURN) drops the older turns' fragments but keeps the END_OF_INPUT marker queued
behind them, which the session still waits for; a hang-up drops both."""

from __future__ import annotations

import re
from typing import Any

import pytest

from voxrelay.ipc.records import CONTROL_BODY, TOKEN_ID, ControlOp, Record, RecordKind
from voxrelay.tts.worker import TTSHandler

SESSION = 1


class FakeSender:
    def __init__(self) -> None:
        self.kinds: list[RecordKind] = []

    def send(self, kind: RecordKind, *parts: bytes, **_: Any) -> bool:
        self.kinds.append(kind)
        return True


class FakeEvents:
    def stamp(self, *args: Any, **kwargs: Any) -> None:
        pass

    def error(self, *args: Any) -> None:
        raise AssertionError(f"stage error: {args}")


@pytest.fixture(scope="module")
def handler() -> TTSHandler:
    return TTSHandler({}, FakeSender(), FakeEvents())  # type: ignore[arg-type]


def _reply_queued_with_end_behind(handler: TTSHandler, turn: int) -> FakeSender:
    """A whole reply of `turn` queued as fragments, none synthesized, the marker behind."""
    out = FakeSender()
    handler.out = out  # type: ignore[assignment]
    for delta in re.findall(r"\S+\s*", "Sure, here is a story. The sea was calm that night."):
        payload = TOKEN_ID.pack(0) + delta.encode()
        handler.handle(Record(RecordKind.TOKEN, 0, SESSION, turn, 0, 0, payload))
    handler.handle(Record(RecordKind.REPLY_END, 0, SESSION, turn, 0, 0, b"stop"))
    handler.handle(Record(RecordKind.END_OF_INPUT, 0, SESSION, 0, 0, 0, b""))
    assert [j for j in handler.jobs if j.turn_id == turn], "no fragment queued"
    assert handler.jobs[-1].fragment is None
    return out


def _control_then_run(handler: TTSHandler, op: ControlOp, turn: int) -> None:
    payload = CONTROL_BODY.pack(op, 0)
    handler.handle(Record(RecordKind.CONTROL, 0, SESSION, turn, 0, 0, payload))
    while handler.step():
        pass


def test_a_barge_in_drops_the_reply_and_keeps_the_end_of_input(handler: TTSHandler) -> None:
    out = _reply_queued_with_end_behind(handler, turn=1)
    _control_then_run(handler, ControlOp.NEW_TURN, turn=2)
    assert out.kinds == [RecordKind.END_OF_INPUT]
    assert not handler.jobs and not handler.chunkers


def test_a_hang_up_drops_the_reply_and_the_end_of_input(handler: TTSHandler) -> None:
    out = _reply_queued_with_end_behind(handler, turn=3)
    _control_then_run(handler, ControlOp.SESSION_CLOSE, turn=0)
    assert out.kinds == []
    assert not handler.jobs
