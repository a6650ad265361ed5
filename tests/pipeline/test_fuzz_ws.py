"""Fuzzing a real `voxrelay serve` process with WebSocket messages, binary and text.

Every answer is a documented event (an `error` with a documented code for what was
wrong) or a documented close code; the server stays up, its memory stays bounded, and a
normal session with real speech still works afterwards. Short in CI; 10,000 inputs per
target under `make soak`.
"""

import asyncio
import json
import socket
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.pipeline.serve_process import AUTH, TOKEN, one_turn
from tests.soak import SOAK, examples
from voxrelay.pipeline.audio_io import read_clip

pytestmark = [pytest.mark.slow, pytest.mark.soak]

CLOSE_CODES = {1000, 1001, 1008, 1009, 1013}  # docs/protocol.md
FRAMING_CLOSE_CODES = {1002, 1007, 1009}  # broken framing, bad UTF-8, too big (RFC 6455)
ERROR_CODES = {
    "invalid_json",
    "invalid_message",
    "unknown_type",
    "invalid_audio",
    "unsupported",
    "stage_failed",
    "turn_too_long",
    "idle_timeout",
}
EVENT_TYPES = {
    "session.created",
    "session.updated",
    "speech.started",
    "transcript.partial",
    "transcript.final",
    "response.text.delta",
    "response.text.done",
    "response.audio.start",
    "response.audio.clear",
    "response.done",
    "trace",
    "error",
}
SETTINGS = settings(
    max_examples=examples(60),
    deadline=None,  # a real server on a loaded 2-core box: time is checked by timeouts
    suppress_health_check=list(HealthCheck),
    database=None,
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
CONTROL = st.fixed_dictionaries(
    {"type": st.sampled_from(["input.end", "interrupt", "session.update", "dance", ""])},
    optional={
        "instructions": JSON_VALUES | st.text(max_size=20_000),
        "voice_speed": JSON_VALUES,
        "extra": JSON_VALUES,
    },
)
MESSAGES = st.lists(
    st.one_of(
        st.binary(max_size=700),  # odd lengths are invalid_audio; even ones are noise
        st.text(max_size=200),
        JSON_VALUES.map(json.dumps),
        CONTROL.map(json.dumps),
    ),
    min_size=1,
    max_size=8,
)


async def _exchange(url: str, messages: list) -> str:
    """Sends the messages, then a marker only this exchange can be answered to; checks
    everything the server says until the marker's answer. Returns how it ended."""
    marker = f"marker-{uuid.uuid4().hex}"
    try:
        async with connect(url, additional_headers=AUTH, open_timeout=30) as ws:
            for message in messages:
                await ws.send(message)
            await ws.send(json.dumps({"type": marker}))
            async with asyncio.timeout(30):
                while True:
                    message = await ws.recv()
                    if isinstance(message, bytes):
                        continue  # reply audio: noise can sound like speech
                    event = json.loads(message)
                    assert event["type"] in EVENT_TYPES, event
                    if event["type"] == "error":
                        assert event["code"] in ERROR_CODES and event["message"], event
                        if marker in event["message"]:
                            return "answered"
    except ConnectionClosed as closed:
        assert closed.rcvd is not None and closed.rcvd.code in CLOSE_CODES, closed
        return f"closed {closed.rcvd.code}"


@pytest.fixture(scope="module")
def fuzzed(serve_process, clips_dir):
    """Normal service before and after; memory measured around the fuzzing."""
    clip = read_clip(clips_dir / "librivox/0880.wav")
    trace, _ = asyncio.run(one_turn(serve_process.url, clip))  # warm: first-turn allocations
    assert trace["error"] is None
    rss_before = serve_process.rss_bytes()
    yield serve_process
    assert serve_process.process.poll() is None, serve_process.log_tail()
    trace, received = asyncio.run(one_turn(serve_process.url, clip))
    assert trace["error"] is None and received > 0, trace
    growth = serve_process.rss_bytes() / rss_before - 1
    print(f"RSS of server + stages: {rss_before / 2**20:.0f} MiB, grew {growth:+.1%}")
    assert growth < (0.05 if SOAK else 0.10), f"RSS grew {growth:.1%}"


def test_websocket_messages(fuzzed):
    outcomes: list[str] = []

    @SETTINGS
    @given(messages=MESSAGES)
    def fuzz(messages):
        outcomes.append(asyncio.run(_exchange(fuzzed.url, messages)))

    fuzz()
    assert "answered" in outcomes
    metrics = fuzzed.metrics()
    assert metrics["voxrelay_sessions"] == 0  # every fuzzing session was freed


def _raw_exchange(port: int, garbage: bytes) -> bytes:
    """A valid upgrade, then bytes that are not WebSocket frames (or are, by chance)."""
    request = (
        f"GET /v1/voice HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)  # then the server must finish the exchange
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    return rest


def test_raw_frames_after_the_upgrade(fuzzed):
    """Client frames must be masked: unmasked garbage is a protocol error (close 1002);
    a frame that parses is handled as a message. Either way the server carries on."""

    @SETTINGS
    @given(garbage=st.binary(min_size=1, max_size=600))
    def fuzz(garbage):
        reply = _raw_exchange(fuzzed.port, garbage)
        closes = _close_codes(reply)
        assert not closes or closes[-1] in CLOSE_CODES | FRAMING_CLOSE_CODES, closes

    fuzz()


def _close_codes(stream: bytes) -> list[int]:
    """Close codes of the server's (unmasked) frames in a byte stream."""
    codes, at = [], 0
    while at + 2 <= len(stream):
        opcode, length = stream[at] & 0x0F, stream[at + 1] & 0x7F
        at += 2
        if length == 126:
            length, at = int.from_bytes(stream[at : at + 2], "big"), at + 2
        elif length == 127:
            length, at = int.from_bytes(stream[at : at + 8], "big"), at + 8
        if opcode == 0x8 and length >= 2:
            codes.append(int.from_bytes(stream[at : at + 2], "big"))
        at += length
    return codes
