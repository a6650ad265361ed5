"""The TTS stage's handler driven in this process (fake rings, the real voice): a barge-in
(NEW_TURN) drops the older turns' fragments but keeps the END_OF_INPUT marker queued
behind them, which the session still waits for; a hang-up drops both. A first fragment
synthesized ahead of its cut sends the same audio as one synthesized after it."""

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
        self.audio = bytearray()

    def send(self, kind: RecordKind, *parts: bytes, **_: Any) -> bool:
        self.kinds.append(kind)
        if kind == RecordKind.AUDIO_OUT:
            self.audio += parts[1]
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


def _token(handler: TTSHandler, turn: int, delta: str) -> None:
    payload = TOKEN_ID.pack(0) + delta.encode()
    handler.handle(Record(RecordKind.TOKEN, 0, SESSION, turn, 0, 0, payload))


def _first_fragment_audio(handler: TTSHandler, turn: int, deltas: list[str], ahead: bool) -> bytes:
    """The audio of the first fragment that `deltas` release, the stage idle (so free to
    work ahead) between deltas or not."""
    out = FakeSender()
    handler.out = out  # type: ignore[assignment]
    for delta in deltas:
        _token(handler, turn, delta)
        if ahead and not handler.jobs:
            handler.step()
    assert len(handler.jobs) == 1, "the last delta should release one fragment"
    # Made ahead: the job carries the audio begun before its cut.
    assert (handler.jobs[0].audio is not None) == ahead
    while handler.step():
        pass
    handler.chunkers.pop((SESSION, turn))
    return bytes(out.audio)


@pytest.fixture(scope="module")
def noiseless() -> TTSHandler:
    """Piper's noise off: the same text gives the same samples, so they can be compared."""
    config = {"noise_scale": 0.0, "noise_w_scale": 0.0}
    return TTSHandler(config, FakeSender(), FakeEvents())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("turn", "deltas"),
    [
        (10, ["I", "'m", " sorry", " for"]),  # the guess holds
        (20, ["The", " ", "1", "0", " of"]),  # "The 1" is undone by "0", "The 10" holds
    ],
)
def test_a_first_fragment_made_ahead_sounds_as_one_made_after_its_cut(
    noiseless: TTSHandler, turn: int, deltas: list[str]
) -> None:
    ahead = _first_fragment_audio(noiseless, turn, deltas, ahead=True)
    assert not noiseless.ahead
    after = _first_fragment_audio(noiseless, turn + 1, deltas, ahead=False)
    assert ahead and ahead == after


def test_a_guess_is_dropped_when_the_turn_is_cut(handler: TTSHandler) -> None:
    for delta in ["I", "'m", " sorry"]:
        _token(handler, 12, delta)
    handler.step()
    assert handler.ahead[(SESSION, 12)].fragment == "I'm sorry"
    _control_then_run(handler, ControlOp.NEW_TURN, turn=13)
    assert not handler.ahead
