"""The stage loop's turn gate (pipeline/worker.py TurnGate): after a NEW_TURN, records of
older turns are dropped in every stage, but not the controls that ask the ASR to number
a turn (they carry none yet): a typed turn sent after an interrupt must still be heard."""

from voxrelay.ipc.records import CONTROL_BODY, ControlOp, Record, RecordKind
from voxrelay.pipeline.worker import TurnGate

SESSION = 7


def _record(kind: RecordKind, turn: int, op: ControlOp | None = None) -> Record:
    payload = CONTROL_BODY.pack(op, 0) + b"Hello." if op is not None else b""
    return Record(kind, 0, SESSION, turn, 0, 0, payload)


def test_a_new_turn_drops_older_turns_but_not_controls_that_wait_for_a_number():
    gate = TurnGate()
    gate.control(_record(RecordKind.CONTROL, 3, ControlOp.NEW_TURN))
    assert not gate.admits(_record(RecordKind.PARTIAL, 2))
    assert gate.admits(_record(RecordKind.PARTIAL, 3))
    assert gate.admits(_record(RecordKind.AUDIO_IN, 0))
    for op in (ControlOp.TEXT_TURN, ControlOp.AGENT_TURN, ControlOp.TURN_BASE):
        assert gate.admits(_record(RecordKind.CONTROL, 0, op)), op
    # The LLM's GREET for an agent turn the ASR numbered 2: superseded, dropped.
    assert not gate.admits(_record(RecordKind.CONTROL, 2, ControlOp.GREET))
    assert gate.admits(_record(RecordKind.CONTROL, 3, ControlOp.GREET))
    gate.control(_record(RecordKind.CONTROL, 0, ControlOp.SESSION_CLOSE))
    assert not gate.admits(_record(RecordKind.CONTROL, 0, ControlOp.TEXT_TURN))
