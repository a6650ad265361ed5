"""The learned end of turn of one stream: each pause's signals in, the silence it may
last out.

ASRStream opens a pause as it sends the SpeculativeEnd (the words and Whisper's closing
probability of the decode at the pause), has its audio scored once that event is out
(Smart Turn, when loaded), and decides it when the LLM's P(end of turn) arrives or the
silence reaches the hint deadline. The decision fuses the signals (asr/turn_end.py), maps
the probability to a wait for the session's eagerness and fallback, and raises it to
what the speaker's own pauses have taught (asr/pause_habit.py). The endpointer, which
ends the turn once the silence reaches that wait, stays the stream's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.pause_habit import PauseHabit
from voxrelay.asr.timeline import SAMPLE_RATE
from voxrelay.asr.turn_end import (
    TurnSignals,
    Weights,
    end_probability,
    wait_ms,
    weights_for,
    weights_without_text,
)
from voxrelay.asr.turn_model import SmartTurn


@dataclass(slots=True)
class PendingEnd:
    """A pause being decided: its audio scored once the SpeculativeEnd is out
    (`TurnDecider.score`), its decision once the LLM's P(end of turn) arrives or the
    silence reaches `deadline_ms` without it."""

    text: str
    closing_prob: float | None  # Whisper's, from the decode of `text`
    deadline_ms: float
    scored: bool = False
    audio_prob: float | None = None
    decision_ns: int = 0  # CPU time spent on the decision so far


@dataclass(frozen=True, slots=True)
class Decision:
    end_prob: float
    wait_ms: int  # the silence this pause may reach before it ends the turn
    decision_ms: float  # CPU time of the scoring and the fusion


class TurnDecider:
    """`weights`: the fusion (by default the fitted one for the config's
    `turn_audio_model`); `habit`: what the session's speaker has shown of their mid-turn
    pauses (by default this decider's own)."""

    def __init__(
        self,
        config: ASRConfig,
        turn_model: SmartTurn | None,
        weights: Weights | None = None,
        habit: PauseHabit | None = None,
    ) -> None:
        self._turn_model = turn_model
        self._weights = weights or weights_for(config.turn_audio_model)
        self._weights_no_text = weights_without_text(self._weights)
        self.habit = habit or PauseHabit(config.turn_adapt_max_ms)
        # The speech end of the last turn a pause ended, until the next speech starts:
        # how long after it the speaker came back.
        self._committed_end: int | None = None

    def score(self, pending: PendingEnd, audio: Callable[[], np.ndarray]) -> None:
        """Score the pause's `audio()` (Smart Turn, ~30 ms) once, if a model is loaded."""
        if pending.scored:
            return
        started = time.perf_counter_ns()
        if self._turn_model is not None:
            pending.audio_prob = self._turn_model.score(audio()).probability
        pending.scored = True
        pending.decision_ns += time.perf_counter_ns() - started

    def decide(
        self, pending: PendingEnd, text_prob: float | None, told: bool, config: ASRConfig
    ) -> Decision:
        """`told`: the LLM's answer came (a probability, or None: it has none); False at
        the deadline, when nothing came within text_hint_wait_ms of silence. `config`:
        the stream's now (a session may change its eagerness and fallback)."""
        started = time.perf_counter_ns()
        weights: Weights | None = self._weights
        if text_prob is None and self._weights.text:
            # The LLM says it has no probability (a backend that does not probe, a server
            # without logprobs, a remote probe past its grace): the fusion fitted without
            # that term decides, not a guess at the missing value. Nothing at all by the
            # deadline (an overloaded LLM, or audio fed faster than real time, where the
            # silence outruns the wall clock): the silence rule, as the pause has already
            # lasted text_hint_wait_ms (docs/asr.md, "Session 21").
            weights = self._weights_no_text if told else None
        signals = TurnSignals(pending.text, pending.audio_prob, text_prob, pending.closing_prob)
        end_prob = end_probability(signals, weights or self._weights)
        if weights is None:  # no such fit for these weights: the silence rule
            wait = config.end_silence_ms
        else:
            wait = wait_ms(end_prob, config.eagerness, config.turn_fallback_ms)
        wait = self.habit.wait_ms(wait, config.turn_fallback_ms)
        decision_ms = (pending.decision_ns + time.perf_counter_ns() - started) / 1e6
        return Decision(end_prob, wait, decision_ms)

    def committed(self, speech_end: int) -> None:
        """A pause ended the turn whose speech ended at sample `speech_end`."""
        self._committed_end = speech_end

    def speech_started(self, sample: int, forced: bool) -> None:
        """Speech starts at `sample` (`forced`: the endpointer cut an overlong utterance
        there, so no one paused): after a committed end, the speaker may have gone on."""
        if self._committed_end is not None and not forced:
            self.habit.speech_after_end((sample - self._committed_end) * 1000 / SAMPLE_RATE)
        self._committed_end = None
