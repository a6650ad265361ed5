"""The UDP server against a Python caller on loopback, with a fake pipeline: the call
flow, retransmissions, CANCEL, OPTIONS, 4xx/5xx, re-INVITE, DTMF, barge-in, hang-up."""

import asyncio
import socket
import time

import numpy as np
import pytest

from tests.pipeline.sip.fake import FakePipeline
from voxrelay.pipeline.sip.caller import Caller
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.message import parse
from voxrelay.pipeline.sip.server import SipServer
from voxrelay.pipeline.trace import TurnTrace

TONE = (np.sin(np.arange(8000) * 2 * np.pi * 440 / 8000) * 8000).astype("<i2").tobytes()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _server(**overrides):
    pipeline = FakePipeline()
    server = SipServer(pipeline, SipConfig(port=0, t1_s=0.05, **overrides))
    address = await server.start()
    return pipeline, server, address


async def _answered_call():
    """A server with a fake pipeline, and a Python caller whose call it has answered."""
    pipeline, server, address = await _server()
    caller = Caller(address)
    await caller.open()
    await caller.dial()
    return pipeline, server, caller, server.calls[caller.call_id]


async def _exchange(address, datagram: bytes, timeout_s: float = 1.0) -> list[bytes]:
    """Send one raw datagram; collect what comes back within the timeout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_sendto(sock, datagram, address)
    replies = []
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            replies.append(await asyncio.wait_for(loop.sock_recv(sock, 9000), left))
        except TimeoutError:
            break
    sock.close()
    return replies


def test_call_flow_audio_dtmf_reply_and_caller_bye():
    async def main():
        pipeline, server, address = await _server()
        caller = Caller(address)
        await caller.open()
        reply = await caller.dial()
        assert reply.status == 200 and b"m=audio" in reply.body
        await asyncio.sleep(0.05)
        call = server.calls[caller.call_id]
        assert call.state.value == "confirmed"
        await caller.stream(TONE[:3200])  # 200 ms: 10 packets
        await caller.press("5")
        await asyncio.sleep(0.1)
        session_id = call.bridge.session_id
        assert len(pipeline.audio[session_id]) == 3200
        assert [e.detail for e in call.bridge.events if e.kind == "dtmf"] == ["5"]
        # A reply from the pipeline (22.05 kHz) leaves as paced 8 kHz PCMU.
        sink = pipeline.sessions[session_id].sink
        sink.on_audio(1, np.zeros(22050 // 2, "<i2").tobytes(), 22050)
        sink.on_turn_done(TurnTrace(session_id, 1, "sip", "streaming"))
        await asyncio.sleep(0.7)
        arrivals = [t for t, p in caller.received]
        assert len(arrivals) == 25  # 500 ms of audio
        gaps_ms = np.diff(arrivals) / 1e6
        assert abs(np.median(gaps_ms) - 20) < 2
        assert caller.received[0][1].marker and not caller.received[1][1].marker
        assert (await caller.hangup()).status == 200
        assert not server.calls and pipeline.closed == [session_id]
        caller.close()
        server.stop()

    run(main())


def test_retransmitted_invite_is_absorbed_and_200_repeats_until_ack():
    async def main():
        pipeline, server, address = await _server()
        caller = Caller(address)
        await caller.open()
        invite = caller.request("INVITE", caller.offer())
        caller.send(invite)
        caller.send(invite)  # a retransmission: must not open a second call
        first = await caller.final_response()
        again = await caller.final_response(2.0)  # 200 retransmitted (T1 = 50 ms)
        assert first.status == again.status == 200 and len(pipeline.sessions) == 1
        caller.remote_tag = first.header("To").rsplit("tag=", 1)[-1]
        caller.send(caller.request("ACK", to_tag=caller.remote_tag))
        await asyncio.sleep(0.3)
        while not caller._responses.empty():  # what arrived before the ACK landed
            caller._responses.get_nowait()
        await asyncio.sleep(0.5)
        assert caller._responses.empty()  # no more after the ACK
        caller.close()
        server.stop()

    run(main())


def test_cancel_while_ringing_gives_487_and_frees_the_call():
    async def main():
        pipeline, server, address = await _server(answer_delay_s=1.0)
        caller = Caller(address)
        await caller.open()
        invite = caller.request("INVITE", caller.offer())
        caller.send(invite)
        await asyncio.sleep(0.1)
        cancel = caller.request("CANCEL")
        cancel.headers = [(k, v) for k, v in invite.headers if k != "Content-Type"]
        cancel.headers = [(k, "1 CANCEL" if k == "CSeq" else v) for k, v in cancel.headers]
        cancel.body = b""
        caller.send(cancel)
        statuses = sorted([(await caller.final_response()).status for _ in range(2)])
        assert statuses == [200, 487]
        assert not server.calls and not pipeline.sessions
        caller.close()
        server.stop()

    run(main())


OPTIONS = (
    "OPTIONS sip:bot@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK{b}\r\n"
    "From: <sip:x@127.0.0.1>;tag=1\r\nTo: <sip:bot@127.0.0.1>\r\nCall-ID: {b}\r\n"
    "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
)


@pytest.mark.parametrize(
    ("datagram", "status"),
    [
        (OPTIONS.format(b="o1"), 200),
        (OPTIONS.format(b="o2").replace("OPTIONS", "REGISTER"), 405),
        (OPTIONS.format(b="o3").replace("OPTIONS", "FROBNICATE"), 501),
        (OPTIONS.format(b="o4").replace("CSeq: 1 OPTIONS", "CSeq: 1 BYE"), 400),
        (OPTIONS.format(b="o5").replace("OPTIONS sip", "BYE sip").replace("1 OPTIONS", "1 BYE"),
         481),
    ],
)  # fmt: skip
def test_single_requests(datagram, status):
    async def main():
        _pipeline, server, address = await _server()
        replies = await _exchange(address, datagram.encode(), 0.3)
        server.stop()
        return replies

    replies = run(main())
    assert [parse(r).status for r in replies] == [status]


def test_garbage_is_dropped_and_source_outside_allowlist_gets_403():
    async def main():
        _pipeline, server, address = await _server()
        assert await _exchange(address, b"\x00\x01garbage\xff", 0.2) == []
        assert await _exchange(address, b"INVITE nonsense\r\n\r\n", 0.2) == []
        assert server.dropped_datagrams == 2
        server.stop()
        _pipeline, strict, address = await _server(allow=("10.0.0.0/8",))
        replies = await _exchange(address, OPTIONS.format(b="o6").encode(), 0.3)
        strict.stop()
        return replies

    assert [parse(r).status for r in run(main())] == [403]


def test_reinvite_hold_and_codec_change_then_bot_hangs_up_on_digit():
    async def main():
        pipeline, server, caller, call = await _answered_call()
        caller.send(caller.request("INVITE", caller.offer("sendonly"), caller.remote_tag))
        held = await caller.final_response()
        caller.send(caller.request("ACK", to_tag=caller.remote_tag))
        assert held.status == 200 and b"a=recvonly" in held.body and call.rtp.held
        caller.codec = "PCMA"
        caller.send(caller.request("INVITE", caller.offer(), caller.remote_tag))
        resumed = await caller.final_response()
        assert b"PCMA/8000" in resumed.body and not call.rtp.held
        assert call.rtp.answer.codec == "PCMA"
        await caller.press("#")  # the default hang-up key
        await asyncio.wait_for(caller.hung_up_by_server.wait(), 2)
        assert not server.calls and pipeline.closed
        caller.close()
        server.stop()

    run(main())


def test_barge_in_drops_queued_rtp_and_goodbye_hangs_up_after_playback():
    async def main():
        pipeline, server, caller, call = await _answered_call()
        sink = pipeline.sessions[call.bridge.session_id].sink
        sink.on_audio(1, bytes(8000 * 2 * 2), 8000)  # 2 s of reply
        await asyncio.sleep(0.2)
        sink.on_text(2, "response.audio.clear", "")
        sent = call.rtp.packets_out
        await asyncio.sleep(0.2)
        assert call.rtp.packets_out <= sent + 1 and call.rtp.pacer.queued_ms == 0
        sink.on_text(2, "response.text", "Thank you for calling, goodbye!")
        sink.on_audio(2, bytes(8000 * 2 // 5), 8000)  # 200 ms
        sink.on_turn_done(TurnTrace(call.bridge.session_id, 2, "sip", "streaming"))
        await asyncio.wait_for(caller.hung_up_by_server.wait(), 2)
        assert call.end_reason == "bot hung up: the dialogue ended"
        assert call.rtp.pacer.queued_ms == 0  # the goodbye was played first
        caller.close()
        server.stop()

    run(main())


def test_a_barge_in_pause_holds_the_queued_rtp_until_resumed_or_cleared():
    async def main():
        pipeline, server, caller, call = await _answered_call()
        pacer = call.rtp.pacer
        sink = pipeline.sessions[call.bridge.session_id].sink
        sink.on_audio(1, bytes(8000 * 2 * 2), 8000)  # 2 s of reply
        await asyncio.sleep(0.2)
        sink.on_text(2, "response.audio.pause", "")  # the caller may be cutting it
        sent = call.rtp.packets_out
        await asyncio.sleep(0.3)
        assert call.rtp.packets_out <= sent + 1 and pacer.queued_ms > 1500  # held, kept
        sink.on_text(2, "response.audio.resume", "")  # "mm-hmm": it plays on
        await asyncio.sleep(0.3)
        assert call.rtp.packets_out >= sent + 10
        # On hold as well: the end of the barge-in pause does not end the hold.
        call.rtp.update(call.rtp.answer, call.rtp.peer, held=True)
        sink.on_text(3, "response.audio.pause", "")
        sink.on_text(3, "response.audio.resume", "")
        sent = call.rtp.packets_out
        await asyncio.sleep(0.2)
        assert call.rtp.packets_out <= sent + 1 and pacer.paused
        call.rtp.update(call.rtp.answer, call.rtp.peer, held=False)
        # A pause that ends in a cut: the queue goes, and the next reply plays.
        sink.on_text(4, "response.audio.pause", "")
        sink.on_text(4, "response.audio.clear", "")
        assert pacer.queued_ms == 0 and not pacer.paused
        sent = call.rtp.packets_out
        sink.on_audio(4, bytes(8000 * 2 // 2), 8000)
        await asyncio.sleep(0.3)
        assert call.rtp.packets_out >= sent + 10
        kinds = [e.kind for e in call.bridge.events]
        assert kinds.count("pause") == 3 and kinds.count("resume") == 2, kinds
        caller.close()
        server.stop()

    run(main())


def test_transfer_digit_sends_refer_and_leaves_after_notify():
    async def main():
        pipeline, server, address = await _server(transfer_uri="sip:agent@127.0.0.1")
        caller = Caller(address)
        await caller.open()
        await caller.dial()
        await caller.press("0")
        await asyncio.sleep(0.2)
        refer = next(r for r in caller.requests if r.method == "REFER")
        assert refer.header("Refer-To") == "<sip:agent@127.0.0.1>"
        notify = caller.request("NOTIFY", to_tag=caller.remote_tag)
        notify.headers += [("Event", "refer"), ("Content-Type", "message/sipfrag")]
        notify.body = b"SIP/2.0 200 OK\r\n"
        caller.send(notify)
        await asyncio.wait_for(caller.hung_up_by_server.wait(), 2)
        assert (await caller.final_response()).status == 200
        caller.close()
        server.stop()

    run(main())


def test_several_calls_are_separate_sessions_and_busy_beyond_max():
    async def main():
        pipeline, server, address = await _server(max_calls=3)
        callers = [Caller(address) for _ in range(4)]
        for caller in callers:
            await caller.open()
        replies = [await caller.dial() for caller in callers]
        assert [r.status for r in replies] == [200, 200, 200, 486]
        await asyncio.gather(*(c.stream(TONE[:1600]) for c in callers[:3]))
        await asyncio.sleep(0.1)
        assert sorted(len(a) for a in pipeline.audio.values()) == [1600] * 3
        for caller in callers[:3]:
            await caller.hangup()
            caller.close()
        assert not server.calls and len(pipeline.closed) == 3
        server.stop()

    run(main())
