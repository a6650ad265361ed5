"""Key presses in the per-turn trace rows (docs/traces.md, Key presses): a Python caller
presses real RFC 4733 digits through the SIP server while the test plays the stage
records of each turn into the call's real `Session` (fake pipeline, no models)."""

import asyncio
import time

from tests.pipeline.sip.fake import FakePipeline
from voxrelay.ipc.records import STAMP_BODY, Record, RecordKind, Stamp
from voxrelay.pipeline.sip.caller import Caller
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.server import SipServer


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def _stamp(session, turn: int, point: Stamp, text: str = "") -> None:
    payload = STAMP_BODY.pack(point, 0) + text.encode()
    session.deliver(
        Record(RecordKind.STAMP, 0, session.session_id, turn, time.perf_counter_ns(), 0, payload)
    )


def _turn_ends(session, turn: int) -> None:
    """The reply's commit, then the TTS's last record of the turn: the row is written."""
    for kind in (RecordKind.COMMIT, RecordKind.AUDIO_END):
        now = time.perf_counter_ns()
        session.deliver(Record(kind, 0, session.session_id, turn, now, 0, b""))


async def _call(**overrides):
    pipeline = FakePipeline()
    server = SipServer(pipeline, SipConfig(port=0, t1_s=0.05, **overrides))
    caller = Caller(await server.start())
    await caller.open()
    assert (await caller.dial()).status == 200
    await asyncio.sleep(0.05)
    call = server.calls[caller.call_id]
    return pipeline, server, caller, call, pipeline.sessions[call.bridge.session_id]


async def _hang_up(server, caller) -> None:
    assert (await caller.hangup()).status == 200
    caller.close()
    server.stop()


async def _press(caller, digits: str) -> None:
    for digit in digits:
        await caller.press(digit)
    await asyncio.sleep(0.1)


def test_digits_go_with_the_turn_in_progress_or_the_next_and_the_rest_in_a_last_row():
    async def main():
        pipeline, server, caller, call, session = await _call()
        await _press(caller, "1")  # before anyone spoke: waits for the first turn
        _stamp(session, 0, Stamp.SPEECH_START)
        await _press(caller, "2")  # while the caller speaks
        _stamp(session, 0, Stamp.ASR_FINAL)
        _stamp(session, 0, Stamp.TRANSCRIPT, "what are your opening hours")
        await _press(caller, "3")  # while the reply is generated
        _turn_ends(session, 0)
        await _press(caller, "45")  # after the turn's row was written, and no turn follows
        pressed = [e for e in call.bridge.events if e.kind == "dtmf"]
        await _hang_up(server, caller)
        return pipeline.rows, pressed

    rows, pressed = run(main())
    assert [e.detail for e in pressed] == ["1", "2", "3", "4", "5"]
    assert [(r["turn"], r["dtmf"]) for r in rows] == [(0, "123"), (1, "45")]
    assert rows[0]["dtmf_first_ns"] == pressed[0].at_ns < rows[0]["speech_start_ns"]
    assert rows[0]["transcript"] == "what are your opening hours"
    last = rows[1]  # the call's last row: only its key presses
    assert last["dtmf_first_ns"] == pressed[3].at_ns
    assert last["transcript"] == "" and last["error"] is None and last["speech_start_ns"] is None


def test_a_turn_without_words_does_not_swallow_a_digit():
    async def main():
        pipeline, server, caller, call, session = await _call()
        _stamp(session, 0, Stamp.SPEECH_START)
        _stamp(session, 0, Stamp.ASR_FINAL)
        _stamp(session, 0, Stamp.TRANSCRIPT, "")  # a cough: no reply, so no row, ever
        await _press(caller, "7")
        _stamp(session, 1, Stamp.SPEECH_START)
        _stamp(session, 1, Stamp.TRANSCRIPT, "agent please")
        _turn_ends(session, 1)
        await _hang_up(server, caller)
        return pipeline.rows

    rows = run(main())
    assert [(r["turn"], r["dtmf"]) for r in rows] == [(1, "7")]


def test_a_cough_during_a_reply_leaves_the_digit_to_the_reply_turn():
    async def main():
        pipeline, server, caller, call, session = await _call()
        _stamp(session, 0, Stamp.SPEECH_START)
        _stamp(session, 0, Stamp.ASR_FINAL)
        _stamp(session, 0, Stamp.TRANSCRIPT, "read me the menu")
        _stamp(session, 1, Stamp.SPEECH_START)  # a cough over the reply: no words
        _stamp(session, 1, Stamp.ASR_FINAL)
        _stamp(session, 1, Stamp.TRANSCRIPT, "")
        await _press(caller, "9")
        _turn_ends(session, 0)
        await _hang_up(server, caller)
        return pipeline.rows

    rows = run(main())
    assert [(r["turn"], r["dtmf"]) for r in rows] == [(0, "9")]


def test_the_hang_up_digit_cuts_a_turn_short_and_still_reaches_the_trace():
    async def main():
        pipeline, server, caller, call, session = await _call()
        _stamp(session, 0, Stamp.SPEECH_START)
        _stamp(session, 0, Stamp.TRANSCRIPT, "tell me a long story")
        await _press(caller, "#")  # the bot hangs up mid-reply: turn 0 is never written
        async with asyncio.timeout(5):
            while server.calls:
                await asyncio.sleep(0.02)
        caller.close()
        server.stop()
        return pipeline.rows, call

    rows, call = run(main())
    assert call.end_reason == "bot hung up: caller pressed #"
    assert [(r["turn"], r["dtmf"], r["transcript"]) for r in rows] == [(1, "#", "")]


def test_a_call_without_digits_writes_no_extra_row():
    async def main():
        pipeline, server, caller, call, session = await _call()
        _stamp(session, 0, Stamp.SPEECH_START)
        _stamp(session, 0, Stamp.TRANSCRIPT, "hello")
        _turn_ends(session, 0)
        await _hang_up(server, caller)
        return pipeline.rows

    rows = run(main())
    assert [(r["turn"], r["dtmf"], r["dtmf_first_ns"]) for r in rows] == [(0, None, None)]
