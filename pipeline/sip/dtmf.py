"""RFC 4733 telephone-event payloads: DTMF digits received in RTP.

A key press is sent as several packets with the same RTP timestamp (the event's
start) and a growing duration, the last ones (usually three) with the E bit. A digit is
reported once, on the first packet of its timestamp: the caller expects a menu to react
on the press, not on release, and retransmitted end packets must not repeat it.

`TraceDigits` puts the digits into the per-turn trace rows (docs/traces.md, Key presses).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from voxrelay.ipc.records import Stamp
from voxrelay.pipeline.session import Session
from voxrelay.pipeline.trace import TurnTrace

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


class TraceDigits:
    """Puts a call's key presses into its session's trace rows.

    A digit goes with the turn in progress: the newest turn whose row is not written yet,
    passing over turns the ASR ended without words (no reply will ever write them).
    Pressed between turns, it waits and goes with the next turn. When the call ends, the
    digits no row carries (still waiting, or in a turn the hang-up cut short, which is
    never written) go into one last row of their own, numbered as the next turn would
    have been.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.waiting: list[tuple[int, str]] = []  # (at_ns, digit) pressed between turns
        self._newest_turn = -1

    def press(self, digit: str, at_ns: int) -> None:
        trace = self._in_progress()
        if trace is None:
            self.waiting.append((at_ns, digit))
        else:
            trace.add_dtmf(digit, at_ns)

    def turn_started(self, turn_id: int) -> None:
        """The caller started speaking: the turn takes the digits pressed before it."""
        self._newest_turn = max(self._newest_turn, turn_id)
        trace = self.session.turns.get(turn_id)
        if trace is not None:
            for at_ns, digit in self.waiting:
                trace.add_dtmf(digit, at_ns)
            self.waiting.clear()

    def call_ended(self) -> TurnTrace | None:
        """Writes the row of the digits no row carries yet; None if there are none."""
        open_turns = self.session.turns.values()
        presses = [(t.dtmf_first_ns, t.dtmf) for t in open_turns if t.dtmf] + self.waiting
        self.waiting = []
        if not presses:
            return None
        newest = max([self._newest_turn, *self.session.turns])
        trace = self.session.trace(newest + 1)
        for at_ns, digits in sorted(presses):
            trace.add_dtmf(digits, at_ns)
        self.session.finish(trace)
        return trace

    def _in_progress(self) -> TurnTrace | None:
        for turn_id in sorted(self.session.turns, reverse=True):
            trace = self.session.turns[turn_id]
            # A turn the ASR ended without words gets no reply, so never a row: pass it
            # (a cough during a reply leaves one above the reply's turn).
            if trace.transcript or Stamp.ASR_FINAL not in trace.stamps:
                return trace
        return None
