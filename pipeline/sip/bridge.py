"""The media port interface and the bridge between one port and one pipeline session.

A media port is a call's audio path to the caller, at 8 kHz PCM16 both ways: RTP with
G.711 (`media.RtpPort`) or an AudioSocket TCP connection. The port hands the caller's
audio, DTMF digits and hang-up to its `CallBridge`; the bridge is the session's `Sink`,
resamples reply audio to 8 kHz per turn, and plays it out through the port.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from voxrelay.pipeline.audio_io import OutputResampler
from voxrelay.pipeline.session import Session, Sink
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.dtmf import TraceDigits
from voxrelay.pipeline.sip.playout import SAMPLE_RATE
from voxrelay.pipeline.trace import TurnTrace

log = logging.getLogger("voxrelay.sip")


class MediaPort(Protocol):
    def play(self, pcm16: bytes) -> None:
        """Queue 8 kHz PCM16 reply audio; it leaves in real-time-paced 20 ms frames."""

    def flush(self) -> None:
        """The reply is complete: send its last partial frame too."""

    def clear(self) -> None:
        """Barge-in: drop every queued frame now (and end a pause)."""

    def pause(self, paused: bool) -> None:
        """The caller's speech may cut the reply: hold the queued frames (True), or send
        them on (False)."""

    def hangup(self, reason: str, after_playback: bool) -> None:
        """The bot ends the call (SIP BYE, AudioSocket hangup frame)."""

    def transfer(self, target: str) -> bool:
        """Hand the caller to `target` (SIP REFER); False where the port cannot."""


class SessionHost(Protocol):
    """What a bridge needs of `pipeline.run.Pipeline` (tests substitute a fake)."""

    def open_session(self, sink: Sink, transport: str) -> Session: ...

    def send_audio(
        self, session_id: int, pcm16: bytes, sample_rate: int, channels: int = 1
    ) -> int: ...

    def close_session(self, session_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class CallEvent:
    at_ns: int  # time.perf_counter_ns()
    kind: str  # "dtmf", "transcript", "reply", "hangup", "barge_in", "pause", "resume"...
    detail: str


class CallBridge:
    """One call's pipeline session: the `Sink` that feeds a `MediaPort`."""

    def __init__(
        self,
        host: SessionHost,
        port: MediaPort,
        config: SipConfig,
        transport: str,
        call_id: str,
    ) -> None:
        self.host = host
        self.port = port
        self.config = config
        self.call_id = call_id
        self.events: list[CallEvent] = []
        self.traces: list[TurnTrace] = []
        self.dropped_input_bytes = 0
        self._resamplers: dict[int, OutputResampler] = {}  # per turn: a turn ends its stream
        self._goodbye = re.compile(config.goodbye_pattern, re.IGNORECASE)
        self._goodbye_turn: int | None = None
        self._dtmf_actions: dict[str, Callable[[str], None]] = {
            "hangup": self._hangup_on_digit,
            "transfer": self._transfer_on_digit,
        }
        self._digit_actions = dict(config.dtmf_actions)
        self.session = host.open_session(self, transport)
        self.session_id = self.session.session_id
        self.session.on_idle_end = self._caller_gone_quiet
        self._idle_hangup = False  # hang up once the agent's goodbye has played
        self.digits = TraceDigits(self.session)
        self.closed = False

    def note(self, kind: str, detail: str) -> CallEvent:
        event = CallEvent(time.perf_counter_ns(), kind, detail)
        self.events.append(event)
        log.info("call %s (session %d): %s %s", self.call_id, self.session_id, kind, detail)
        return event

    # From the media port.

    def on_caller_audio(self, pcm16: bytes) -> None:
        if not self.closed:
            self.dropped_input_bytes += self.host.send_audio(self.session_id, pcm16, SAMPLE_RATE)

    def on_dtmf(self, digit: str) -> None:
        self.digits.press(digit, self.note("dtmf", digit).at_ns)
        action = self._digit_actions.get(digit)
        if action is not None:
            self._dtmf_actions[action](digit)

    def _hangup_on_digit(self, digit: str) -> None:
        self.port.hangup(f"caller pressed {digit}", after_playback=False)

    def _transfer_on_digit(self, digit: str) -> None:
        target = self.config.transfer_uri
        if target is None:
            self.note("error", f"digit {digit} asks for a transfer but no transfer_uri is set")
        elif self.port.transfer(target):
            self.note("transfer", target)
        else:
            self.note("error", "this media port cannot transfer; hanging up instead")
            self.port.hangup("transfer unsupported", after_playback=False)

    # Sink: called from the supervisor's record callback; never awaits.

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        resampler = self._resamplers.get(turn_id)
        if resampler is None:
            resampler = self._resamplers[turn_id] = OutputResampler(sample_rate, SAMPLE_RATE)
        self.port.play(resampler.convert(pcm16))

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        if kind == "response.audio.clear":  # barge-in: the caller speaks over the reply
            self.port.clear()
            for stale in [t for t in self._resamplers if t < turn_id]:
                del self._resamplers[stale]
            self.note("barge_in", f"turn {turn_id}")
        elif kind in ("response.audio.pause", "response.audio.resume"):
            self.port.pause(kind == "response.audio.pause")
            self.note(kind.removeprefix("response.audio."), f"turn {turn_id}")
        elif kind == "speech.started":
            self.digits.turn_started(turn_id)
        elif kind == "transcript.final":
            self.note("transcript", text)
        elif kind == "response.text":
            self.note("reply", text)
            if self._goodbye.search(text):
                self._goodbye_turn = turn_id

    def on_error(self, turn_id: int, message: str) -> None:
        self.note("error", f"turn {turn_id}: {message}")

    def on_audio_end(self, turn_id: int) -> None:
        resampler = self._resamplers.pop(turn_id, None)
        if resampler is not None:
            self.port.play(resampler.convert(b"", last=True))
        self.port.flush()

    def on_turn_done(self, trace: TurnTrace) -> None:
        if trace.turn_id in self._resamplers:  # failed or cut before its audio was complete
            self.on_audio_end(trace.turn_id)
        self.traces.append(trace)
        # Rows still waiting for their reply to play are written when the call closes:
        # a call already over is not hung up again.
        if trace.turn_id == self._goodbye_turn and not trace.barge_in_ns and not self.closed:
            self.port.hangup("the dialogue ended", after_playback=True)
        if self._idle_hangup and trace.opening:
            self._idle_hangup = False
            if not trace.barge_in_ns and not self.closed:  # spoken over: the caller is back
                self.port.hangup("the caller stopped answering", after_playback=True)

    def _caller_gone_quiet(self, session: Session, goodbye: bool) -> None:
        # pipeline/idle.py gave up on the caller: hang up after its goodbye, if it says one.
        if goodbye:
            self._idle_hangup = True
        elif not self.closed:
            self.port.hangup("the caller stopped answering", after_playback=False)

    def on_input_end(self, lost: bool) -> None:
        pass  # a call's input ends with the call (`close`)

    def close(self) -> None:
        """The call is over: free the session here and in every stage."""
        if not self.closed:
            self.digits.call_ended()  # before the session goes: it writes the row
            self.closed = True
            self.host.close_session(self.session_id)
            self._resamplers.clear()
