"""`RtpPort`: a call's RTP socket as a media port (G.711 both ways, RFC 4733 DTMF in).

Received packets pass the reorder buffer, then go by payload type to the G.711 decoder
(either law: a codec change by re-INVITE may race the packets) or the DTMF receiver.
Only the peer is heard (the IP its SDP names, or the one its signalling came from: a
caller behind NAT advertises an address it cannot send from), and we send only to the
address its SDP gave.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import cast

from voxrelay.pipeline.sip import g711
from voxrelay.pipeline.sip.bridge import CallBridge
from voxrelay.pipeline.sip.dtmf import DtmfReceiver
from voxrelay.pipeline.sip.playout import FRAME_BYTES, FRAME_SAMPLES, PacedPort, Pacer
from voxrelay.pipeline.sip.rtp import JitterBuffer, RtpPacket, parse_packet
from voxrelay.pipeline.sip.sdp import STATIC_PAYLOADS, Answer

log = logging.getLogger("voxrelay.sip")
Address = tuple[str, int]
_LOST_FRAME = bytes(FRAME_BYTES)  # a packet declared lost plays as 20 ms of silence


class RtpPort(PacedPort, asyncio.DatagramProtocol):
    def __init__(
        self, answer: Answer, peer: Address, jitter_packets: int, signalling_ip: str
    ) -> None:
        self.answer = answer
        self.peer = peer
        self.signalling_ip = signalling_ip
        self.held = False
        self.ssrc = secrets.randbits(32)
        self._sequence = secrets.randbits(16)
        self._timestamp_base = secrets.randbits(32)
        self.jitter = JitterBuffer(jitter_packets)
        self._dtmf = DtmfReceiver()
        self.pacer = Pacer(self._send_frame)
        self.bridge: CallBridge | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self.on_hangup: Callable[[str, bool], None] = lambda reason, after: None
        self.on_transfer: Callable[[str], bool] = lambda target: False
        self.last_packet_at = time.monotonic()
        self.packets_in = 0
        self.packets_out = 0
        self.foreign_packets = 0  # from an address other than the peer's: ignored
        self.bad_packets = 0

    @classmethod
    async def open(
        cls, host: str, answer: Answer, peer: Address, jitter_packets: int, signalling_ip: str
    ) -> RtpPort:
        loop = asyncio.get_running_loop()
        _transport, port = await loop.create_datagram_endpoint(
            lambda: cls(answer, peer, jitter_packets, signalling_ip), local_addr=(host, 0)
        )
        return port

    @property
    def local_port(self) -> int:
        assert self._transport is not None
        port: int = self._transport.get_extra_info("sockname")[1]
        return port

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector transport does not subclass DatagramTransport.
        self._transport = cast(asyncio.DatagramTransport, transport)

    def update(self, answer: Answer, peer: Address, held: bool) -> None:
        """A re-INVITE: new codec, address or hold state; the stream keeps its SSRC."""
        self.answer, self.peer, self.held = answer, peer, held
        self.pacer.set_paused(held)

    def start(self) -> None:
        self.pacer.start()

    def close(self) -> None:
        self.pacer.stop()
        if self._transport is not None:
            self._transport.close()

    # Receive.

    def datagram_received(self, data: bytes, addr: Address) -> None:
        if addr[0] != self.peer[0] and addr[0] != self.signalling_ip:
            self.foreign_packets += 1
            return
        try:
            packet = parse_packet(data)
        except ValueError:
            self.bad_packets += 1  # RTCP lands here too when sent to the RTP port
            return
        self.packets_in += 1
        self.last_packet_at = time.monotonic()
        for due in self.jitter.push(packet):
            self._deliver(due)

    def _deliver(self, packet: RtpPacket | None) -> None:
        if self.bridge is None:
            return
        if packet is None:
            self.bridge.on_caller_audio(_LOST_FRAME)
            return
        if packet.payload_type == self.answer.dtmf_payload_type:
            try:
                digit = self._dtmf.feed(packet.payload, packet.timestamp)
            except ValueError:
                self.bad_packets += 1
                return
            if digit is not None:
                self.bridge.on_dtmf(digit)
            return
        codec = STATIC_PAYLOADS.get(packet.payload_type)
        if codec is None and packet.payload_type == self.answer.payload_type:
            codec = self.answer.codec  # a dynamic number the offer mapped to G.711
        if codec is not None and not self.held:
            self.bridge.on_caller_audio(g711.decode(packet.payload, codec))

    # Send: the pacer calls this every 20 ms while a reply plays.

    def _send_frame(self, pcm16: bytes, tick: int, first: bool) -> None:
        if self._transport is None or self.held:
            return
        packet = RtpPacket(
            self.answer.payload_type,
            self._sequence,
            (self._timestamp_base + tick * FRAME_SAMPLES) % (1 << 32),
            self.ssrc,
            g711.encode(pcm16, self.answer.codec),
            marker=first,  # start of a talkspurt after silence (RFC 3551 4.1)
        )
        self._sequence = (self._sequence + 1) % (1 << 16)
        self._transport.sendto(packet.to_bytes(), self.peer)
        self.packets_out += 1

    # MediaPort (play, flush and clear come from PacedPort).

    def hangup(self, reason: str, after_playback: bool) -> None:
        self.on_hangup(reason, after_playback)

    def transfer(self, target: str) -> bool:
        return self.on_transfer(target)
