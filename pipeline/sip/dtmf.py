"""RFC 4733 telephone-event payloads: DTMF digits received in RTP.

A key press is sent as several packets with the same RTP timestamp (the event's
start) and a growing duration, the last ones (usually three) with the E bit. A digit is
reported once, on the first packet of its timestamp: the caller expects a menu to react
on the press, not on release, and retransmitted end packets must not repeat it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EVENT = struct.Struct("!BBH")  # event, E|R|volume, duration
DIGITS = "0123456789*#ABCD"  # events 0..15


@dataclass(frozen=True, slots=True)
class ToneEvent:
    digit: str
    end: bool
    volume: int  # -dBm0, 0..63
    duration: int  # in timestamp units (1/8000 s)


def parse_event(payload: bytes) -> ToneEvent:
    if len(payload) < EVENT.size:
        raise ValueError(f"telephone-event payload of {len(payload)} bytes; need 4")
    event, flags, duration = EVENT.unpack_from(payload)
    if event >= len(DIGITS):
        raise ValueError(f"telephone-event {event} is not a DTMF digit")
    return ToneEvent(DIGITS[event], bool(flags & 0x80), flags & 0x3F, duration)


def build_event(digit: str, end: bool, duration: int, volume: int = 10) -> bytes:
    if digit not in DIGITS or len(digit) != 1:
        raise ValueError(f"{digit!r} is not a DTMF digit; use one of {DIGITS}")
    return EVENT.pack(DIGITS.index(digit), (0x80 if end else 0) | volume, duration)


class DtmfReceiver:
    """Turns a stream of telephone-event packets into digits, each reported once."""

    def __init__(self) -> None:
        self._last_timestamp: int | None = None

    def feed(self, payload: bytes, rtp_timestamp: int) -> str | None:
        event = parse_event(payload)
        if rtp_timestamp == self._last_timestamp:
            return None  # a later packet of the press already reported
        self._last_timestamp = rtp_timestamp
        return event.digit
