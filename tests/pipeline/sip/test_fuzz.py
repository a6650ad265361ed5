"""A misbehaving SIP peer: fuzzed datagrams into the real SIP server, fuzzed frame streams
into the real AudioSocket server (a fake pipeline behind both; no models).

Whatever arrives, the server answers or drops it without raising, its call table stays
within `max_calls`, every call a fuzzed INVITE opened ends and gives back its sockets,
every transaction expires, and a well-formed request afterwards is served as usual.
Short in CI, 10,000 examples per target under `make soak`.
"""

import asyncio
import socket
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pipeline.sip.fake import FakePipeline
from tests.pipeline.sip.test_server import _exchange
from tests.soak import bounded_resources, examples
from voxrelay.pipeline.sip.audiosocket import AudioSocketServer, Kind, frame
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.message import parse
from voxrelay.pipeline.sip.server import SipServer

pytestmark = pytest.mark.soak

SETTINGS = settings(
    max_examples=examples(200),
    deadline=2000,  # ms per example: a hang fails the example, not the whole run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
HEADERS = (
    "Via: SIP/2.0/UDP 127.0.0.1:5099;branch=z9hG4bK{n}\r\nMax-Forwards: 70\r\n"
    "From: <sip:fuzz@127.0.0.1>;tag=f{n}\r\nTo: <sip:bot@127.0.0.1>\r\nCall-ID: fuzz-{n}\r\n"
    "Contact: <sip:fuzz@127.0.0.1:5099>\r\n"
)
SDP = (
    "v=0\r\no=fuzz 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio 40000 RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"
    "a=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n"
)


def _request(method: str, n: int, body: str = "") -> bytes:
    extra = "Content-Type: application/sdp\r\n" if body else ""
    return (
        f"{method} sip:bot@127.0.0.1 SIP/2.0\r\n{HEADERS.format(n=n)}CSeq: 1 {method}\r\n"
        f"{extra}Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


TEMPLATES = [
    _request("INVITE", 1, SDP),
    _request("OPTIONS", 2),
    _request("BYE", 3),
    _request("ACK", 4),
    _request("CANCEL", 5),
    _request("INFO", 6, "Signal=5\r\nDuration=160\r\n"),
    b"SIP/2.0 200 OK\r\n" + HEADERS.format(n=7).encode() + b"CSeq: 1 BYE\r\n\r\n",
]


def _mutated(template: bytes, edits: list[tuple[float, int, bytes]]) -> bytes:
    """The template with each edit (where, how many bytes to cut, what to put there)."""
    data = template
    for where, cut, insert in edits:
        at = int(where * len(data))
        data = data[:at] + insert + data[at + cut :]
    return data


EDITS = st.lists(
    st.tuples(
        st.floats(0, 1),
        st.integers(0, 40),
        st.one_of(
            st.binary(max_size=40),
            st.sampled_from([b"\r\n", b"\r\n\r\n", b":", b";", b" ", b"\x00", b"SIP/2.0"]),
            st.sampled_from([b"Content-Length: 99999\r\n", b"CSeq: -1 INVITE\r\n", b"To: <>\r\n"]),
        ),
    ),
    max_size=4,
)
DATAGRAMS = st.one_of(
    st.binary(max_size=1500),
    st.builds(_mutated, st.sampled_from(TEMPLATES), EDITS),
    st.builds(lambda t, n: t * n, st.sampled_from(TEMPLATES), st.integers(2, 40)),  # oversized
)


def test_sip_datagrams():
    loop = asyncio.new_event_loop()
    server = SipServer(FakePipeline(), SipConfig(port=0, t1_s=0.02, max_calls=4))
    # Replies go to a socket of ours that nobody reads: no ICMP, no peer to disturb.
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    peer = sink.getsockname()

    async def deliver(datagram: bytes) -> None:
        # As the loop would deliver it, but an exception surfaces here instead of in
        # the loop's log.
        server.datagram_received(datagram, peer)
        await asyncio.sleep(0)  # let the tasks and timers it started run a step

    @SETTINGS
    @given(DATAGRAMS)
    def feed(datagram: bytes) -> None:
        loop.run_until_complete(deliver(datagram))
        assert len(server.calls) <= server.config.max_calls

    async def drained(limit_s: float) -> None:
        for _ in range(int(limit_s / 0.05)):
            if not server.calls and not len(server.server_transactions):
                return
            await asyncio.sleep(0.05)

    try:
        address = loop.run_until_complete(server.start())
        with bounded_resources(None, settle=lambda: loop.run_until_complete(asyncio.sleep(0.05))):
            feed()
            # Every call a fuzzed INVITE opened times out (no ACK) and closes its media
            # socket; every transaction expires: nothing the fuzz began stays in memory.
            loop.run_until_complete(drained(15.0))
            assert not server.calls, "a call opened by a fuzzed INVITE never ended"
            assert not len(server.server_transactions), "transactions never expired"
        replies = loop.run_until_complete(_exchange(address, _request("OPTIONS", 999_999), 2.0))
    finally:
        server.stop()
        loop.run_until_complete(asyncio.sleep(0))  # the transport closes its socket
        sink.close()
        loop.close()
    assert [parse(reply).status for reply in replies] == [200]


FRAMES = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from([int(k) for k in Kind] + [0x02, 0x11, 0x7F]), st.binary(max_size=400)
        ).map(
            lambda kind_payload: (
                struct.pack("!BH", kind_payload[0], len(kind_payload[1])) + kind_payload[1]
            )
        ),
        st.binary(max_size=64),  # raw bytes: a lying length, a cut header
    ),
    max_size=12,
)


async def _audiosocket_exchange(address, opening: bytes, stream: list[bytes]) -> None:
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(opening + b"".join(stream))
        await writer.drain()
        writer.write_eof()
        # The server ends the call (hang-up, error, or our EOF): read until it closes.
        async with asyncio.timeout(5):
            while await reader.read(65536):
                pass
    except ConnectionError:
        pass  # it may close before reading all we sent
    finally:
        writer.close()


def test_audiosocket_frames():
    loop = asyncio.new_event_loop()
    pipeline = FakePipeline()
    server = AudioSocketServer(pipeline, SipConfig(max_calls=4), ("127.0.0.1", 0))
    address = loop.run_until_complete(server.start())

    @SETTINGS
    @given(st.booleans(), FRAMES)
    def feed(named: bool, stream: list[bytes]) -> None:
        # Half the streams open like Asterisk (a UUID frame), half start with garbage.
        opening = frame(Kind.UUID, uuid.uuid4().bytes) if named else b""
        loop.run_until_complete(_audiosocket_exchange(address, opening, stream))

    async def good_call() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(*address)
        writer.write(frame(Kind.UUID, uuid.uuid4().bytes) + frame(Kind.AUDIO, b"\x01\x00" * 160))
        writer.write(frame(Kind.HANGUP))
        await writer.drain()
        async with asyncio.timeout(5):
            while await reader.read(65536):
                pass
        writer.close()
        session_id = max(pipeline.sessions)  # the newest call's session
        return session_id, bytes(pipeline.audio[session_id])

    try:
        with bounded_resources(None, settle=lambda: loop.run_until_complete(asyncio.sleep(0.05))):
            feed()
            loop.run_until_complete(asyncio.sleep(0.2))
            assert not server.bridges, "a fuzzed call was left open"
        session_id, audio = loop.run_until_complete(good_call())
    finally:
        loop.run_until_complete(server.stop())
        loop.close()
    assert audio == b"\x01\x00" * 160, f"session {session_id} got {len(audio)} bytes"
