"""The agent's opening (ControlOp.GREET): spoken as written or written by the model, with
no user words before it, and kept in the history the next turn is answered from."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.llm.stage import FakeEvents, FakeSender, native_handler, reply_text
from voxrelay.ipc.records import CONTROL_BODY, FINAL_INFO, ControlOp, Record, RecordKind
from voxrelay.llm.backend import REPLY_HEADER
from voxrelay.llm.native_backend import NativeBackend
from voxrelay.llm.worker import LLMHandler

GREETING = "Thanks for calling. How can I help?"


class Events(FakeEvents):
    def __init__(self) -> None:
        self.commits: list[int] = []

    def commit(self, session_id: int, turn_id: int, origin_ns: int) -> None:
        self.commits.append(turn_id)


def _greet(turn: int, verbatim: bool, text: str = "") -> Record:
    body = CONTROL_BODY.pack(ControlOp.GREET, int(verbatim)) + text.encode()
    return Record(RecordKind.CONTROL, 0, 1, turn, 0, 0, body)


def _final(turn: int, text: str) -> Record:
    return Record(RecordKind.FINAL, 0, 1, turn, 0, 0, FINAL_INFO.pack(5.0) + text.encode())


def _until_reply_end(handler: LLMHandler, count: int) -> None:
    out: FakeSender = handler.out  # type: ignore[assignment]
    deadline = time.monotonic() + 60
    while sum(kind == RecordKind.REPLY_END for kind, _ in out.records) < count:
        assert time.monotonic() < deadline, "no REPLY_END"
        handler.step()


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(prompt, probe) of every request the stage submits."""
    seen: list[tuple[str, bool]] = []
    submit = NativeBackend.submit

    def spy(self: NativeBackend, request_id: int, prompt: str, probe: bool = True) -> None:
        seen.append((prompt, probe))
        submit(self, request_id, prompt, probe)

    monkeypatch.setattr(NativeBackend, "submit", spy)
    return seen


@pytest.fixture
def stage(model_path: Path, submitted: list[tuple[str, bool]]) -> Iterator[LLMHandler]:
    """The stage's handler on the real engine, its requests seen by `submitted`."""
    yield from native_handler(model_path, max_new_tokens=24, events=Events())


def test_a_written_greeting_is_spoken_as_written_and_heads_the_history(
    stage: LLMHandler, submitted: list[tuple[str, bool]]
) -> None:
    out, events = stage.out, stage.events
    stage.handle(_greet(0, verbatim=True, text=f"  {GREETING} "))
    assert reply_text(out) == GREETING  # at once: no request, nothing generated
    ends = [payload for kind, payload in out.records if kind == RecordKind.REPLY_END]
    assert ends == [b"greeting"] and events.commits == [0] and not submitted
    assert not stage.replies
    stage.handle(_final(1, "What time is it?"))
    _until_reply_end(stage, 2)
    prompt, probe = submitted[-1]
    # The greeting is the assistant's first message; no empty user message before it.
    opening = f"<|im_start|>assistant\n{GREETING}<|im_end|>\n"
    assert f"<|im_end|>\n{opening}<|im_start|>user\nWhat time is it?{REPLY_HEADER}" in prompt
    assert prompt.count("<|im_start|>user") == 1 and probe


def test_the_model_writes_an_opening_from_the_system_prompt(
    stage: LLMHandler, submitted: list[tuple[str, bool]]
) -> None:
    out, events = stage.out, stage.events
    stage.handle(_greet(0, verbatim=False))
    _until_reply_end(stage, 1)
    opening = reply_text(out).strip()
    stage.handle(_final(1, "Hello."))
    _until_reply_end(stage, 2)
    (first, first_probe), (second, second_probe) = submitted
    # No user words to read P(end of turn) after: the opening asks for no probe.
    assert "<|im_start|>user" not in first and first.endswith(REPLY_HEADER) and not first_probe
    assert opening and events.commits == [0, 1], opening
    assert f"<|im_start|>assistant\n{opening}" in second and second_probe
