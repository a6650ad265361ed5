"""ASRStream: one session's audio in, ASR events out.

Every frame goes through the streaming resampler and Silero VAD; the endpointer turns VAD
scores into utterance boundaries; Whisper re-decodes the growing utterance for partials
and decodes it once more as soon as trailing silence begins, so that by the time the
silence is long enough to end the turn the transcript is usually already there.

Decodes run inline: `feed` returns after at most a couple of decodes (~0.2-0.7 s for
tiny.en on 2 threads), so the caller should read its input without dropping frames
while it waits. Timestamps stay right regardless, since they come from `arrival_ns`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from voxrelay.asr.audio import AudioConverter, AudioInput
from voxrelay.asr.budget import DecodeBudget
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.endpoint import Endpointer, EndpointEvent, EndpointKind, Phase
from voxrelay.asr.events import (
    TYPED,
    AgentTurn,
    ASREvent,
    Discard,
    EndScored,
    Final,
    Hold,
    Resume,
    SpeculativeEnd,
    SpeechStart,
)
from voxrelay.asr.models import ASRModels
from voxrelay.asr.pause_habit import PauseHabit
from voxrelay.asr.timeline import SAMPLE_RATE, ArrivalClock, SampleBuffer
from voxrelay.asr.turn_decision import PendingEnd, TurnDecider
from voxrelay.asr.turn_end import Weights, unfinished
from voxrelay.asr.utterance import WHISPER_MAX_SAMPLES, Transcriber, Utterance
from voxrelay.asr.vad import WINDOW_SAMPLES, StreamingVAD

# Audio kept while nobody speaks: the pre-speech pad plus the VAD's onset delay.
SILENCE_HISTORY_SAMPLES = SAMPLE_RATE


class ASRStream:
    """Streaming ASR for one session. Not thread-safe; one per audio source."""

    def __init__(
        self,
        config: ASRConfig,
        models: ASRModels,
        budget: DecodeBudget | None = None,
        before_decode: Callable[[], None] | None = None,
        shared: Callable[[], bool] | None = None,
        weights: Weights | None = None,
        hold_unfinished: bool = True,
        habit: PauseHabit | None = None,
    ) -> None:
        """`models`: from `load_asr` with a config naming the same model(s). `budget`:
        shared by every stream of one process (asr/budget.py); by default this stream
        has its own. `before_decode`: called as each Whisper decode starts (the worker
        sends the events it holds then, so a decode never delays them). `shared`: for
        "auto", whether other sessions share the process now (asked as each utterance
        starts; without it the stream is alone). `weights`, `hold_unfinished`: the
        learned end of turn's fusion and whether the words' rule holds a pause (the
        benchmark's single-signal detectors change them); by default the fitted ones for
        the config's `turn_audio_model`. `habit`: what the session's speaker has shown
        of their mid-turn pauses (asr/pause_habit.py); by default this stream's own."""
        self.config = config
        self._shared = shared
        self._vad = StreamingVAD(models.vad)
        self._endpointer = Endpointer(config)
        self._clock = ArrivalClock()
        self._pad = config.speech_pad_ms * SAMPLE_RATE // 1000
        longest = int(config.max_utterance_s * SAMPLE_RATE) + 2 * self._pad
        self._audio = SampleBuffer(longest + 4 * SAMPLE_RATE)
        budget = budget or DecodeBudget(config.partial_cpu_share)
        self._words = Transcriber(config, models, self._audio, budget, before_decode)
        self._converter: AudioConverter | None = None
        self._utterance: Utterance | None = None
        self._next_id = 0
        self._flushed = False
        wants_turn = config.learns_end and config.turn_audio_model == "smart-turn"
        if wants_turn and models.turn is None:
            raise ValueError(
                "ASRStream: turn_audio_model='smart-turn' but Smart Turn was not loaded; "
                "load_asr() on a config that asks for it"
            )
        self._turn = TurnDecider(config, models.turn if wants_turn else None, weights, habit)
        self._hold_unfinished = hold_unfinished
        self._handlers: dict[EndpointKind, Callable[[EndpointEvent, int], list[ASREvent]]] = {
            EndpointKind.START: self._on_start,
            EndpointKind.PAUSE: self._on_pause,
            EndpointKind.SPECULATIVE_END: self._on_speculative_end,
            EndpointKind.RESUME: self._on_resume,
            EndpointKind.END: self._on_end,
        }

    def feed(
        self, audio: AudioInput, sample_rate: int, channels: int, arrival_ns: int
    ) -> list[ASREvent]:
        """Add one frame that arrived at `arrival_ns` (perf_counter_ns); return new events.

        `audio` is PCM16 bytes or an int16/float array, interleaved if stereo. The format
        must stay the same for the life of the stream.
        """
        if self._flushed:
            raise ValueError("feed() after flush(): start a new ASRStream for new input")
        if self._converter is None:
            self._converter = AudioConverter(sample_rate, channels)
        elif (sample_rate, channels) != (self._converter.sample_rate, self._converter.channels):
            raise ValueError(
                f"audio format changed mid-stream from {self._converter.sample_rate} Hz x "
                f"{self._converter.channels} to {sample_rate} Hz x {channels}; "
                "start a new ASRStream for the new format"
            )
        before = self._converter.input_frames
        samples = self._converter.convert(audio)
        self._clock.record(self._converter.input_frames - before, sample_rate, arrival_ns)
        return self._process(samples)

    def flush(self, arrival_ns: int) -> list[ASREvent]:
        """End of input: finalize any open utterance. The stream accepts no more audio."""
        if self._flushed:
            return []
        self._flushed = True
        events: list[ASREvent] = []
        if self._converter is not None:
            events += self._process(self._converter.flush())
        # The flush arrived now; audio the clock has not seen yet is stamped with it.
        self._clock.record(0, SAMPLE_RATE, arrival_ns)
        now = self._vad.windows_done * WINDOW_SAMPLES
        for prob in self._vad.pad_and_finish():
            now += WINDOW_SAMPLES
            events += self._on_window(prob, now)
        return events + self._end_utterance()

    def _end_utterance(self) -> list[ASREvent]:
        """The utterance under way, if any, ends at the audio heard so far (its Final)."""
        events: list[ASREvent] = []
        for endpoint_event in self._endpointer.finish(self._audio.end):
            events += self._handlers[endpoint_event.kind](endpoint_event, self._audio.end)
        return events

    def _new_utterance_id(self) -> int:
        utterance_id = self._next_id
        self._next_id += 1
        return utterance_id

    def _process(self, samples: np.ndarray) -> list[ASREvent]:
        self._audio.append(samples)
        probs = self._vad.push(samples)
        now = (self._vad.windows_done - len(probs)) * WINDOW_SAMPLES
        events: list[ASREvent] = []
        for prob in probs:
            now += WINDOW_SAMPLES
            events += self._on_window(prob, now)
        keep_from = (
            now - SILENCE_HISTORY_SAMPLES - self._pad
            if self._utterance is None
            else self._utterance.audio_start
        )
        self._audio.keep_from(keep_from)
        self._clock.forget_before(keep_from)
        return events

    def _on_window(self, prob: float, now: int) -> list[ASREvent]:
        """One VAD window ending at sample `now`: boundary events, then maybe a partial."""
        events: list[ASREvent] = []
        for endpoint_event in self._endpointer.push(prob):
            events += self._handlers[endpoint_event.kind](endpoint_event, now)
        utterance = self._utterance
        if (
            utterance is not None
            and utterance.pending is not None
            and self._endpointer.silence_ms >= utterance.pending.deadline_ms
        ):
            events += self._decide(utterance, None, now, told=False)
            utterance = self._utterance
        if (
            utterance is not None
            and self._endpointer.phase is Phase.SPEECH
            and self._words.partial_due(utterance, now)
        ):
            events += self._words.partial(utterance, self._words.decode(utterance, now))
        return events

    def _on_start(self, event: EndpointEvent, now: int) -> list[ASREvent]:
        # After a forced cut the audio before the cut belongs to the previous utterance.
        audio_start = event.sample if event.forced else max(event.sample - self._pad, 0)
        names = self.config.whisper_models  # (alone, shared) for "auto"
        model = names[-1] if self._shared is not None and self._shared() else names[0]
        self._turn.speech_started(event.sample, event.forced)
        utterance = Utterance(self._new_utterance_id(), audio_start, model)
        self._utterance = utterance
        self._words.last_decode_at = now
        return [SpeechStart(utterance.utterance_id, self._clock.arrival_ns(event.sample))]

    def _on_pause(self, event: EndpointEvent, now: int) -> list[ASREvent]:
        # Start the end-of-turn decode as soon as silence begins: if the silence lasts, the
        # SpeculativeEnd and the Final reuse it instead of waiting for a decode.
        utterance = self._current()
        return self._words.partial(utterance, self._words.decode(utterance, now))

    def _on_speculative_end(self, event: EndpointEvent, now: int) -> list[ASREvent]:
        utterance = self._current()
        transcript = self._words.through(utterance, event.sample, now)
        if not transcript.text:
            return []
        if (
            self.config.holds_unfinished
            and self._hold_unfinished
            and not self._endpointer.held
            and unfinished(transcript.text)
        ):
            # No SpeculativeEnd yet: the endpointer sends it again before the later end.
            self._endpointer.hold(self.config.turn_fallback_ms)
            return [Hold(utterance.utterance_id)]
        utterance.speculated = True
        speech_end_ns = self._clock.arrival_ns(event.sample)
        events = [
            *self._words.rollback(utterance, transcript.text),
            SpeculativeEnd(utterance.utterance_id, transcript.text, speech_end_ns),
        ]
        if self.config.learns_end:
            deadline = self._endpointer.silence_ms + self.config.text_hint_wait_ms
            utterance.pending = PendingEnd(transcript.text, transcript.closing_prob, deadline)
            self._endpointer.extend(self.config.turn_fallback_ms)
        return events

    def text_turn(self, text: str, arrival_ns: int) -> list[ASREvent]:
        """A turn the user typed, arrived at `arrival_ns`: an utterance under way ends
        first (its Final, with what was said so far), then `text` is the next utterance,
        with no audio: its SpeechStart (typed) and its Final, ended at `arrival_ns`."""
        if self._flushed:
            raise ValueError("text_turn() after flush(): start a new ASRStream for new input")
        events = self._end_utterance()
        utterance_id = self._new_utterance_id()
        return [
            *events,
            SpeechStart(utterance_id, arrival_ns, typed=True),
            Final(utterance_id, text, arrival_ns, 0.0, TYPED),
        ]

    def agent_turn(self, text: str, verbatim: bool) -> list[ASREvent]:
        """The agent speaks now: the next utterance number is its turn. ValueError while
        the user is speaking (an utterance is open): their turn is answered instead."""
        if self._utterance is not None:
            raise ValueError("the user is speaking: the agent speaks after their turn")
        return [AgentTurn(self._new_utterance_id(), text, verbatim)]

    def score_pending(self) -> None:
        """Score the open pause's audio (Smart Turn, ~30 ms), if one waits for it. The
        worker calls this once it has sent the SpeculativeEnd, so the LLM prefills the
        reply (and reads its own probability) while this runs."""
        utterance = self._utterance
        if utterance is None or utterance.pending is None:
            return
        now = self._vad.windows_done * WINDOW_SAMPLES
        start = max(utterance.audio_start, now - WHISPER_MAX_SAMPLES)
        self._turn.score(utterance.pending, lambda: self._audio.read(start, now))

    def hint(self, utterance_id: int, text_prob: float | None) -> list[ASREvent]:
        """The LLM's P(end of turn) for the pause of `utterance_id` (late ones are ignored);
        None: the LLM has none to give (a remote backend), so the pause is decided now."""
        utterance = self._utterance
        if utterance is None or utterance.utterance_id != utterance_id or not utterance.pending:
            return []
        return self._decide(utterance, text_prob, self._vad.windows_done * WINDOW_SAMPLES)

    def set_turn_taking(self, eagerness: str, fallback_ms: int) -> None:
        """This stream's eagerness and fallback (asr/turn_end.py) from its next pause;
        ValueError if either is out of range."""
        self.config = replace(self.config, eagerness=eagerness, turn_fallback_ms=fallback_ms)

    def _decide(
        self, utterance: Utterance, text_prob: float | None, now: int, told: bool = True
    ) -> list[ASREvent]:
        """`told`: the LLM's answer came (a probability, or None: it has none); False at
        the deadline, when nothing came within text_hint_wait_ms of silence."""
        self.score_pending()
        pending = utterance.pending
        assert pending is not None
        utterance.pending = None
        decision = self._turn.decide(pending, text_prob, told, self.config)
        scored = EndScored(
            utterance.utterance_id,
            pending.audio_prob,
            text_prob,
            pending.closing_prob,
            decision.end_prob,
            decision.wait_ms,
            decision.decision_ms,
        )
        if decision.wait_ms > self._endpointer.silence_ms:
            self._endpointer.extend(decision.wait_ms)
            return [scored]
        events: list[ASREvent] = [scored]
        for endpoint_event in self._endpointer.end_now():
            events += self._handlers[endpoint_event.kind](endpoint_event, now)
        return events

    def _on_resume(self, event: EndpointEvent, now: int) -> list[ASREvent]:
        utterance = self._current()
        utterance.pending = None
        if not utterance.speculated:
            return []
        utterance.speculated = False
        return [Resume(utterance.utterance_id)]

    def _on_end(self, event: EndpointEvent, now: int) -> list[ASREvent]:
        utterance = self._current()
        self._utterance = None
        if event.forced:
            # Cut inside speech: decode exactly up to the cut, the next utterance starts there.
            transcript = self._words.decode(utterance, event.sample).transcript
        else:
            until = min(now, event.sample + self._pad)
            transcript = self._words.through(utterance, event.sample, until)
        if not transcript.text:
            return [Discard(utterance.utterance_id)]
        if not event.forced and self.config.learns_end:
            self._turn.committed(event.sample)
        speech_end_ns = self._clock.arrival_ns(event.sample)
        final = Final(
            utterance.utterance_id,
            transcript.text,
            speech_end_ns,
            transcript.decode_ms,
            utterance.model,
        )
        return [*self._words.rollback(utterance, transcript.text), final]

    def _current(self) -> Utterance:
        assert self._utterance is not None, "endpointer reported a boundary outside an utterance"
        return self._utterance
