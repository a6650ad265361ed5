"""RTP (RFC 3550) packets and the receive-side reorder (jitter) buffer.

The buffer adds no delay to packets that arrive in order: each is released at once.
Only a gap holds later packets back, for at most `depth` packets (20 ms each); then the
missing one is declared lost and the caller gets `None` in its place (it plays 20 ms of
silence there, so the ASR's timeline keeps its length).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct("!BBHII")  # V|P|X|CC, M|PT, sequence, timestamp, SSRC
VERSION = 2
SEQ_MOD = 1 << 16
MAX_REORDER = 100  # a jump further than this (either way) restarts the sequence


@dataclass(frozen=True, slots=True)
class RtpPacket:
    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    payload: bytes
    marker: bool = False

    def to_bytes(self) -> bytes:
        second = (0x80 if self.marker else 0) | self.payload_type
        header = HEADER.pack(VERSION << 6, second, self.sequence, self.timestamp, self.ssrc)
        return header + self.payload


def parse_packet(datagram: bytes) -> RtpPacket:
    """ValueError for anything that is not an RTP v2 packet (RTCP included)."""
    if len(datagram) < HEADER.size:
        raise ValueError(f"RTP packet of {len(datagram)} bytes is shorter than its header")
    first, second, sequence, timestamp, ssrc = HEADER.unpack_from(datagram)
    if first >> 6 != VERSION:
        raise ValueError(f"RTP version {first >> 6}; expected 2")
    payload_type = second & 0x7F
    if 72 <= payload_type <= 76:
        raise ValueError("an RTCP packet, not RTP")
    offset = HEADER.size + 4 * (first & 0x0F)  # CSRC list
    if first & 0x10:  # header extension: 16-bit profile, 16-bit length in words
        if len(datagram) < offset + 4:
            raise ValueError("truncated RTP header extension")
        offset += 4 + 4 * struct.unpack_from("!H", datagram, offset + 2)[0]
    end = len(datagram)
    if first & 0x20:  # padding: the last byte counts it
        end -= datagram[-1]
    if offset > end:
        raise ValueError("RTP header longer than the packet")
    return RtpPacket(
        payload_type, sequence, timestamp, ssrc, datagram[offset:end], bool(second & 0x80)
    )


def seq_distance(newer: int, older: int) -> int:
    """Signed distance between 16-bit sequence numbers (wrap-around aware)."""
    return (newer - older + SEQ_MOD // 2) % SEQ_MOD - SEQ_MOD // 2


class JitterBuffer:
    """Reorders by sequence number; drops duplicates and packets already given up on."""

    def __init__(self, depth: int) -> None:
        if depth < 0:
            raise ValueError(f"jitter buffer depth must be >= 0 packets, got {depth}")
        self.depth = depth
        self._expected: int | None = None
        self._ssrc: int | None = None
        self._held: dict[int, RtpPacket] = {}
        self.lost = 0
        self.late = 0

    def push(self, packet: RtpPacket) -> list[RtpPacket | None]:
        """Packets now due, in order; None stands for one declared lost."""
        if self._expected is None or packet.ssrc != self._ssrc:
            self._restart(packet)
        assert self._expected is not None
        distance = seq_distance(packet.sequence, self._expected)
        if distance < 0:
            if distance < -MAX_REORDER:
                self._restart(packet)
                return self.push(packet)
            self.late += 1  # a duplicate, or too late: its slot was already played
            return []
        if distance > MAX_REORDER:
            self._restart(packet)
            distance = 0
        self._held[packet.sequence] = packet
        return self._release()

    def _restart(self, packet: RtpPacket) -> None:
        self._ssrc = packet.ssrc
        self._expected = packet.sequence
        self._held.clear()

    def _release(self) -> list[RtpPacket | None]:
        assert self._expected is not None
        due: list[RtpPacket | None] = []
        while self._held:
            packet = self._held.pop(self._expected, None)
            if packet is None:
                if len(self._held) <= self.depth:
                    break  # wait a little for the missing one
                self.lost += 1
            due.append(packet)
            self._expected = (self._expected + 1) % SEQ_MOD
        return due
