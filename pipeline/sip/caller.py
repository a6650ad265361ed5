"""A minimal SIP caller (UAC) on loopback, for the tests, the bench and smoke checks.

It dials with a G.711 offer, streams 8 kHz PCM16 as paced RTP, presses RFC 4733 keys,
records every RTP packet it receives (with its arrival time on the monotonic clock),
answers the server's in-dialog requests (BYE, REFER) and hangs up. Not a phone: no
authentication, no forking, one call per instance.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import cast

from voxrelay.pipeline.sip import g711
from voxrelay.pipeline.sip.dtmf import build_event
from voxrelay.pipeline.sip.message import SipMessage, parse, response
from voxrelay.pipeline.sip.playout import FRAME_BYTES, FRAME_NS, FRAME_SAMPLES
from voxrelay.pipeline.sip.rtp import RtpPacket, parse_packet
from voxrelay.pipeline.sip.transaction import Address, new_branch

DTMF_PAYLOAD_TYPE = 101


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[bytes, Address, int]] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector transport does not subclass DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Address) -> None:
        self.queue.put_nowait((data, addr, time.perf_counter_ns()))


class Caller:
    def __init__(self, server: Address, codec: str = "PCMU") -> None:
        self.server = server
        self.codec = codec
        self.call_id = secrets.token_hex(8) + "@voxrelay-caller"
        self.tag = secrets.token_hex(4)
        self.received: list[tuple[int, RtpPacket]] = []  # (arrival ns, packet)
        self.requests: list[SipMessage] = []  # requests the server sent us
        self.hung_up_by_server = asyncio.Event()
        self.last_audio_sent_ns = 0
        self._cseq = 1
        self._sequence = secrets.randbits(16)
        self._timestamp = secrets.randbits(31)
        self._responses: asyncio.Queue[SipMessage] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self.remote_tag = ""
        self.peer_rtp: Address = ("127.0.0.1", 0)

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        _, self._sip = await loop.create_datagram_endpoint(_Endpoint, local_addr=("127.0.0.1", 0))
        _, self._rtp = await loop.create_datagram_endpoint(_Endpoint, local_addr=("127.0.0.1", 0))
        self._tasks = [loop.create_task(self._read_sip()), loop.create_task(self._read_rtp())]

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for endpoint in (self._sip, self._rtp):
            if endpoint.transport is not None:
                endpoint.transport.close()

    def _port(self, endpoint: _Endpoint) -> int:
        assert endpoint.transport is not None
        port: int = endpoint.transport.get_extra_info("sockname")[1]
        return port

    def request(self, method: str, body: bytes = b"", to_tag: str = "") -> SipMessage:
        number = self._cseq if method != "ACK" else self._cseq - 1
        if method not in ("ACK", "CANCEL"):
            self._cseq += 1
        message = SipMessage(method=method, uri=f"sip:bot@{self.server[0]}:{self.server[1]}")
        to = "<sip:bot@127.0.0.1>" + (f";tag={to_tag}" if to_tag else "")
        message.headers += [
            ("Via", f"SIP/2.0/UDP 127.0.0.1:{self._port(self._sip)};branch={new_branch()}"),
            ("Max-Forwards", "70"),
            ("From", f"<sip:caller@127.0.0.1>;tag={self.tag}"),
            ("To", to),
            ("Call-ID", self.call_id),
            ("CSeq", f"{number} {method}"),
            ("Contact", f"<sip:caller@127.0.0.1:{self._port(self._sip)}>"),
        ]
        if body:
            message.headers.append(("Content-Type", "application/sdp"))
        message.body = body
        return message

    def offer(self, direction: str = "sendrecv") -> bytes:
        payload = 0 if self.codec == "PCMU" else 8
        port = self._port(self._rtp)
        return (
            f"v=0\r\no=caller 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            f"m=audio {port} RTP/AVP {payload} {DTMF_PAYLOAD_TYPE}\r\n"
            f"a=rtpmap:{payload} {self.codec}/8000\r\n"
            f"a=rtpmap:{DTMF_PAYLOAD_TYPE} telephone-event/8000\r\na=fmtp:101 0-15\r\n"
            f"a={direction}\r\n"
        ).encode()

    def send(self, message: SipMessage) -> None:
        assert self._sip.transport is not None
        self._sip.transport.sendto(message.to_bytes(), self.server)

    async def final_response(self, timeout_s: float = 10.0) -> SipMessage:
        async with asyncio.timeout(timeout_s):
            while True:
                reply = await self._responses.get()
                if reply.status >= 200:
                    return reply

    async def dial(self) -> SipMessage:
        """INVITE, wait for the final response, ACK a 2xx; returns that response."""
        invite = self.request("INVITE", self.offer())
        self.send(invite)
        reply = await self.final_response()
        if reply.status < 300:
            self.remote_tag = reply.header("To").rsplit("tag=", 1)[-1]
            for line in reply.body.decode().split("\r\n"):
                if line.startswith("m=audio"):
                    self.peer_rtp = ("127.0.0.1", int(line.split()[1]))
            self.send(self.request("ACK", to_tag=self.remote_tag))
        return reply

    async def hangup(self) -> SipMessage:
        self.send(self.request("BYE", to_tag=self.remote_tag))
        return await self.final_response()

    def _rtp_send(self, packet: RtpPacket) -> None:
        assert self._rtp.transport is not None
        self._rtp.transport.sendto(packet.to_bytes(), self.peer_rtp)

    async def stream(self, pcm16: bytes) -> None:
        """8 kHz PCM16 as 20 ms RTP packets, paced against the start time."""
        start_ns = time.perf_counter_ns()
        for index, offset in enumerate(range(0, len(pcm16), FRAME_BYTES)):
            delay_ns = start_ns + index * FRAME_NS - time.perf_counter_ns()
            if delay_ns > 0:
                await asyncio.sleep(delay_ns / 1e9)
            frame = pcm16[offset : offset + FRAME_BYTES].ljust(FRAME_BYTES, b"\0")
            payload_type = 0 if self.codec == "PCMU" else 8
            self._next(payload_type, g711.encode(frame, self.codec), FRAME_SAMPLES, index == 0)
            self.last_audio_sent_ns = time.perf_counter_ns()

    def _next(self, payload_type: int, payload: bytes, step: int, marker: bool) -> None:
        self._rtp_send(
            RtpPacket(payload_type, self._sequence, self._timestamp, 0x5EED, payload, marker)
        )
        self._sequence = (self._sequence + 1) % (1 << 16)
        self._timestamp = (self._timestamp + step) % (1 << 32)

    async def press(self, digit: str) -> None:
        """One RFC 4733 key press: three updates, then the end packet three times."""
        start = self._timestamp
        for duration in (160, 320, 480):
            self._rtp_send(
                RtpPacket(DTMF_PAYLOAD_TYPE, self._sequence, start, 0x5EED,
                          build_event(digit, False, duration), duration == 160)
            )  # fmt: skip
            self._sequence = (self._sequence + 1) % (1 << 16)
            await asyncio.sleep(0.02)
        for _ in range(3):
            self._rtp_send(
                RtpPacket(DTMF_PAYLOAD_TYPE, self._sequence, start, 0x5EED,
                          build_event(digit, True, 640))
            )  # fmt: skip
            self._sequence = (self._sequence + 1) % (1 << 16)
        self._timestamp = (self._timestamp + 640) % (1 << 32)

    async def _read_sip(self) -> None:
        while True:
            data, addr, _ = await self._sip.queue.get()
            message = parse(data)
            if message.is_request:
                self.requests.append(message)
                if message.method != "ACK" and self._sip.transport is not None:
                    self._sip.transport.sendto(response(message, 200, "OK").to_bytes(), addr)
                if message.method == "BYE":
                    self.hung_up_by_server.set()
            else:
                self._responses.put_nowait(message)

    async def _read_rtp(self) -> None:
        while True:
            data, _addr, arrival_ns = await self._rtp.queue.get()
            self.received.append((arrival_ns, parse_packet(data)))

    def received_pcm16(self) -> bytes:
        return b"".join(
            g711.decode(packet.payload, self.codec)
            for _, packet in self.received
            if packet.payload_type in (0, 8)
        )
