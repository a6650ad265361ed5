"""Endpointing: turns per-window VAD probabilities into utterance boundaries.

Pure logic on window indices (no models, no clocks), so it is unit-tested directly.
Positions are 16 kHz sample indices since the stream began; window i covers
samples [i * 512, (i + 1) * 512).

    SILENCE --min_speech of voiced windows--> SPEECH                (START)
    SPEECH  --first unvoiced window--> TRAILING                     (PAUSE)
    TRAILING --speculative_silence--> SPECULATIVE                   (SPECULATIVE_END)
    TRAILING/SPECULATIVE --end_silence--> SILENCE                   (END)
    SPECULATIVE --hold()--> TRAILING: this pause's end and speculative end move later
    TRAILING/SPECULATIVE --extend()--> this pause's end moves later (learned end of turn)
    TRAILING/SPECULATIVE --end_now()--> SILENCE                     (END)
    TRAILING/SPECULATIVE --voiced window--> SPEECH                  (RESUME if SPECULATIVE)
    any utterance phase reaching max_utterance_s: cut at the quietest recent window
                                                                    (END + START, forced)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.vad import WINDOW_SAMPLES

WINDOW_MS = WINDOW_SAMPLES * 1000 / 16_000  # 32 ms
# Silero's own hysteresis: once speaking, only a clearly lower score counts as silence,
# so scores wobbling around the threshold do not flap the state.
HYSTERESIS = 0.15
# A forced cut looks this far back for the quietest window (a breath, a word gap).
CUT_SEARCH_S = 3.0


class Phase(Enum):
    SILENCE = auto()
    SPEECH = auto()
    TRAILING = auto()
    SPECULATIVE = auto()


class EndpointKind(Enum):
    START = auto()  # sample: first voiced sample
    PAUSE = auto()  # sample: speech end so far (trailing silence began)
    SPECULATIVE_END = auto()  # sample: speech end
    RESUME = auto()  # sample: where speech came back
    END = auto()  # sample: speech end (or the cut point, when forced)


@dataclass(frozen=True, slots=True)
class EndpointEvent:
    kind: EndpointKind
    sample: int
    forced: bool = False  # a max_utterance_s cut, not a pause in speech


def _windows(ms: float) -> int:
    return max(1, math.ceil(ms / WINDOW_MS))


class Endpointer:
    """Feed one VAD probability per window; get the boundary events it implies."""

    def __init__(self, config: ASRConfig) -> None:
        self._on = config.vad_threshold
        self._off = max(config.vad_threshold - HYSTERESIS, 0.01)
        self._min_speech = _windows(config.min_speech_ms)
        self._speculative = _windows(config.speculative_silence_ms)
        self._end = _windows(config.end_silence_ms)
        # This pause's thresholds: the config's, unless `hold` moved them.
        self._pause_speculative = self._speculative
        self._pause_end = self._end
        self.held = False  # `hold` was called in this pause
        self._max_samples = int(config.max_utterance_s * 16_000)
        self._cut_search = _windows(CUT_SEARCH_S * 1000)
        self.phase = Phase.SILENCE
        self._window = 0  # index of the next window to arrive
        self._voiced = False
        self._run_start = 0  # first window of the current voiced run (while SILENCE)
        self._run = 0
        self._silence = 0  # unvoiced windows since the speech end
        self.start_sample = 0
        self.speech_end_sample = 0
        self._probs: list[float] = []  # this utterance's window scores, for the cut search

    @property
    def in_utterance(self) -> bool:
        return self.phase is not Phase.SILENCE

    def push(self, prob: float) -> list[EndpointEvent]:
        index = self._window
        self._window += 1
        if prob >= self._on:
            self._voiced = True
        elif prob < self._off:
            self._voiced = False
        if self.phase is Phase.SILENCE:
            return self._in_silence(index)
        self._probs.append(prob)
        events = self._in_utterance(index)
        if (
            self.phase is not Phase.SILENCE
            and self._window * WINDOW_SAMPLES - self.start_sample >= self._max_samples
        ):
            events += self._cut()
        return events

    def hold(self, end_silence_ms: int) -> None:
        """The speech so far stops mid-turn (asr/turn_end.py): end this pause only after
        `end_silence_ms` of silence, with the SPECULATIVE_END as long before that as usual.
        Call it on a SPECULATIVE_END; the next voiced window undoes it."""
        assert self.phase is Phase.SPECULATIVE and not self.held, "hold() outside a pause"
        self.held = True
        self.phase = Phase.TRAILING
        self._pause_end = max(_windows(end_silence_ms), self._end)
        self._pause_speculative = self._pause_end - (self._end - self._speculative)

    @property
    def silence_ms(self) -> float:
        """Silence since the speech end, while in a pause."""
        return self._silence * WINDOW_MS

    def extend(self, end_silence_ms: int) -> None:
        """End this pause only after `end_silence_ms` of silence (a learned end of turn
        waiting for its decision, or deciding to wait). Call it in a pause."""
        assert self.phase in (Phase.TRAILING, Phase.SPECULATIVE), "extend() outside a pause"
        self._pause_end = max(_windows(end_silence_ms), self._silence + 1)

    def end_now(self) -> list[EndpointEvent]:
        """This pause ends the turn now (its learned decision was to commit)."""
        assert self.phase in (Phase.TRAILING, Phase.SPECULATIVE), "end_now() outside a pause"
        self._to_silence()
        return [EndpointEvent(EndpointKind.END, self.speech_end_sample)]

    def finish(self, end_sample: int) -> list[EndpointEvent]:
        """End of input at `end_sample`: close any open utterance."""
        if self.phase is Phase.SILENCE:
            return []
        end = end_sample if self.phase is Phase.SPEECH else self.speech_end_sample
        self._to_silence()
        return [EndpointEvent(EndpointKind.END, max(end, self.start_sample))]

    def _in_silence(self, index: int) -> list[EndpointEvent]:
        if not self._voiced:
            self._run = 0
            return []
        if self._run == 0:
            self._run_start = index
        self._run += 1
        if self._run < self._min_speech:
            return []
        self.phase = Phase.SPEECH
        self.start_sample = self._run_start * WINDOW_SAMPLES
        self._probs = [1.0] * self._run  # voiced run: never a cut candidate
        return [EndpointEvent(EndpointKind.START, self.start_sample)]

    def _in_utterance(self, index: int) -> list[EndpointEvent]:
        if self._voiced:
            resumed = self.phase is Phase.SPECULATIVE
            self.phase = Phase.SPEECH
            self._new_pause()
            if resumed:
                return [EndpointEvent(EndpointKind.RESUME, index * WINDOW_SAMPLES)]
            return []
        if self.phase is Phase.SPEECH:
            self.phase = Phase.TRAILING
            self.speech_end_sample = index * WINDOW_SAMPLES
        self._silence += 1
        events: list[EndpointEvent] = []
        if self._silence == 1:
            events.append(EndpointEvent(EndpointKind.PAUSE, self.speech_end_sample))
        if self._silence == self._pause_speculative:
            self.phase = Phase.SPECULATIVE
            events.append(EndpointEvent(EndpointKind.SPECULATIVE_END, self.speech_end_sample))
        if self._silence >= self._pause_end:
            events.append(EndpointEvent(EndpointKind.END, self.speech_end_sample))
            self._to_silence()
        return events

    def _cut(self) -> list[EndpointEvent]:
        if self.phase is not Phase.SPEECH:
            # Already in trailing silence: end at the real speech end, no word is split.
            self._to_silence()
            return [EndpointEvent(EndpointKind.END, self.speech_end_sample)]
        # Quietest window among the recent ones (latest on ties), cut at its middle.
        recent = self._probs[-self._cut_search :]
        quietest = min(range(len(recent)), key=lambda i: (recent[i], -i))
        cut_window = self._window - len(recent) + quietest
        cut = cut_window * WINDOW_SAMPLES + WINDOW_SAMPLES // 2
        self.start_sample = cut
        self._probs = self._probs[len(self._probs) - len(recent) + quietest + 1 :]
        return [
            EndpointEvent(EndpointKind.END, cut, forced=True),
            EndpointEvent(EndpointKind.START, cut, forced=True),
        ]

    def _to_silence(self) -> None:
        self.phase = Phase.SILENCE
        self._new_pause()
        self._run = 0
        self._probs = []

    def _new_pause(self) -> None:
        self._silence = 0
        self._pause_speculative = self._speculative
        self._pause_end = self._end
        self.held = False
