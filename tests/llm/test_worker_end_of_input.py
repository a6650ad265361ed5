"""END_OF_INPUT held in the LLM stage for a reply still decoding goes on when a barge-in
(NEW_TURN) aborts that reply: the session waiting for its input to end must hear of it.
A hang-up (SESSION_CLOSE) drops it with the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.llm.stage import FakeEvents, FakeSender, native_handler
from voxrelay.ipc.records import CONTROL_BODY, FINAL_INFO, ControlOp, Record, RecordKind
from voxrelay.llm.worker import LLMHandler

SESSION = 1


@pytest.fixture(scope="module")
def handler(model_path: Path) -> Iterator[LLMHandler]:
    yield from native_handler(model_path, 64, FakeEvents())


def _decoding_with_end_held(handler: LLMHandler, turn: int) -> FakeSender:
    """A committed reply of `turn` that has started decoding, END_OF_INPUT behind it."""
    out = FakeSender()
    handler.out = out  # type: ignore[assignment]
    payload = FINAL_INFO.pack(5.0) + b"Tell me a long story about the sea."
    handler.handle(Record(RecordKind.FINAL, 0, SESSION, turn, 0, 0, payload))
    handler.step()
    handler.handle(Record(RecordKind.END_OF_INPUT, 0, SESSION, 0, 0, 0, b""))
    # Otherwise the marker went out at once and the control below proves nothing.
    assert [r for r in handler.replies.values() if r.session_id == SESSION], "reply ended"
    assert SESSION in handler.pending_end
    assert RecordKind.END_OF_INPUT not in [kind for kind, _ in out.records]
    return out


def _control(handler: LLMHandler, op: ControlOp, turn: int) -> None:
    payload = CONTROL_BODY.pack(op, 0)
    handler.handle(Record(RecordKind.CONTROL, 0, SESSION, turn, 0, 0, payload))
    while handler.step():
        pass


def test_a_barge_in_after_the_end_of_input_sends_the_marker_on(handler: LLMHandler) -> None:
    out = _decoding_with_end_held(handler, turn=1)
    _control(handler, ControlOp.NEW_TURN, turn=2)
    kinds = [kind for kind, _ in out.records]
    assert kinds.count(RecordKind.END_OF_INPUT) == 1, kinds
    assert kinds[-1] == RecordKind.END_OF_INPUT, "the marker must come behind the reply"
    assert SESSION not in handler.pending_end and not handler.replies
    assert not handler.backend.has_pending_work()


def test_a_hang_up_after_the_end_of_input_drops_the_marker(handler: LLMHandler) -> None:
    out = _decoding_with_end_held(handler, turn=3)
    _control(handler, ControlOp.SESSION_CLOSE, turn=0)
    assert RecordKind.END_OF_INPUT not in [kind for kind, _ in out.records]
    assert SESSION not in handler.pending_end and not handler.replies
