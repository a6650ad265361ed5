"""DISMISS: a backchannel said over a reply ("Okay.") gets no reply and leaves no trace
in the history, whichever way its records and the control cross in the stage: before
its FINAL (the control ring is read first), while its reply generates, or after the
reply has ended."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.llm.stage import FakeSender, native_handler
from voxrelay.ipc.records import CONTROL_BODY, FINAL_INFO, ControlOp, Record, RecordKind
from voxrelay.llm.worker import LLMHandler

SESSION = 1


@pytest.fixture
def handler(model_path: Path) -> Iterator[LLMHandler]:
    yield from native_handler(model_path, 8)


def _send(handler: LLMHandler, kind: RecordKind, turn: int, text: str = "") -> None:
    if kind == RecordKind.CONTROL:
        payload = CONTROL_BODY.pack(ControlOp.DISMISS, 0)
    else:
        payload = (FINAL_INFO.pack(5.0) if kind == RecordKind.FINAL else b"") + text.encode()
    handler.handle(Record(kind, 0, SESSION, turn, 0, 0, payload))


def _drain(handler: LLMHandler) -> None:
    while handler.step():
        pass


def _turns_out(out: FakeSender, kind: RecordKind) -> int:
    return sum(1 for k, _ in out.records if k == kind)


def _history(handler: LLMHandler) -> list[tuple[str, str]]:
    return list(handler.dialogues[SESSION].exchanges)


def test_dismissed_before_its_final_the_turn_is_never_answered(handler: LLMHandler) -> None:
    _send(handler, RecordKind.FINAL, 1, "Tell me about the moon.")
    _drain(handler)
    out = handler.out = FakeSender()
    _send(handler, RecordKind.CONTROL, 2)  # DISMISS overtook the turn's records
    _send(handler, RecordKind.SPECULATIVE_END, 2, "Okay.")
    _send(handler, RecordKind.FINAL, 2, "Okay.")
    _drain(handler)
    assert _turns_out(out, RecordKind.TOKEN) == 0, out.records
    assert [user for user, _ in _history(handler)] == ["Tell me about the moon."]
    assert not handler.replies and not handler.dismissed[SESSION]  # nothing left over
    _send(handler, RecordKind.FINAL, 3, "And the sun?")  # the next turn is answered
    _drain(handler)
    assert [user for user, _ in _history(handler)][-1] == "And the sun?"


def test_dismissed_while_its_reply_generates_the_reply_stops(handler: LLMHandler) -> None:
    out = handler.out = FakeSender()
    _send(handler, RecordKind.SPECULATIVE_END, 1, "Okay.")  # speculative, uncommitted
    handler.step()
    _send(handler, RecordKind.CONTROL, 1)
    _send(handler, RecordKind.FINAL, 1, "Okay.")
    _drain(handler)
    assert _turns_out(out, RecordKind.RESUME) == 1  # the TTS drops what it had of it
    assert _turns_out(out, RecordKind.COMMIT) == 0 and not _history(handler)
    out = handler.out = FakeSender()
    _send(handler, RecordKind.FINAL, 2, "Okay.")  # committed, generating
    handler.step()
    _send(handler, RecordKind.CONTROL, 2)
    _drain(handler)
    assert _turns_out(out, RecordKind.TOKEN) <= 2 and _turns_out(out, RecordKind.RESUME) == 1
    assert not _history(handler) and not handler.replies and not handler.dismissed[SESSION]


def test_dismissed_after_its_reply_ended_it_leaves_the_history(handler: LLMHandler) -> None:
    _send(handler, RecordKind.FINAL, 1, "Tell me about the moon.")
    _send(handler, RecordKind.FINAL, 2, "Mm-hmm.")
    _drain(handler)
    # both replies generate at once: either may end, and enter the history, first
    assert sorted(user for user, _ in _history(handler)) == ["Mm-hmm.", "Tell me about the moon."]
    _send(handler, RecordKind.CONTROL, 2)
    assert [user for user, _ in _history(handler)] == ["Tell me about the moon."]
    assert not handler.dismissed.get(SESSION)
