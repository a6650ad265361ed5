"""One utterance's words as they grow: Whisper re-decodes the utterance's audio (the last
30 s of it at most), LocalAgreement-2 keeps the words two decodes agree on, and the last
decode stands for the transcript where it already heard all the speech. `ASRStream`
(asr/stream.py) says when to decode; this does the decoding and paces the partials.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from voxrelay.asr.agreement import LocalAgreement
from voxrelay.asr.budget import DecodeBudget
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.decoder import Transcript, WhisperDecoder
from voxrelay.asr.events import ASREvent, Partial, Rollback
from voxrelay.asr.models import ASRModels
from voxrelay.asr.timeline import SAMPLE_RATE, SampleBuffer
from voxrelay.asr.turn_decision import PendingEnd

WHISPER_MAX_SAMPLES = 30 * SAMPLE_RATE
# Partials need some words to say anything; decoding the first syllable is wasted work.
MIN_PARTIAL_SAMPLES = SAMPLE_RATE // 2


@dataclass(slots=True)
class Decoded:
    transcript: Transcript
    covers_until: int  # the decode saw the utterance's audio up to this sample


@dataclass(slots=True)
class Utterance:
    utterance_id: int
    audio_start: int  # first sample handed to Whisper (speech start minus the pad)
    model: str  # the Whisper model decoding it, chosen at its start
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    last: Decoded | None = None
    speculated: bool = False  # a SpeculativeEnd is out and not yet resolved
    pending: PendingEnd | None = None  # a learned end of turn awaiting its text signal


class Transcriber:
    """The Whisper decodes of one stream's utterances, read from its sample buffer."""

    def __init__(
        self,
        config: ASRConfig,
        models: ASRModels,
        audio: SampleBuffer,
        budget: DecodeBudget,
        before_decode: Callable[[], None] | None,
    ) -> None:
        missing = [name for name in config.whisper_models if name not in models.whisper]
        if missing:
            raise ValueError(
                f"ASRStream: Whisper model(s) {missing} for model={config.model!r} were not "
                "loaded; load them with load_asr() on a config with the same model"
            )
        self._decoders = {
            name: WhisperDecoder(models.whisper[name], replace(config, model=name))
            for name in config.whisper_models
        }
        self._audio = audio
        self._budget = budget
        self._before_decode = before_decode
        self._partial_every = config.partial_interval_ms * SAMPLE_RATE // 1000
        self.last_decode_at = 0  # the sample the last decode heard up to
        self._last_decode_ms = 0.0

    def partial_due(self, utterance: Utterance, now: int) -> bool:
        """Whether a partial decode of `utterance` is due at sample `now` (speech goes on)."""
        return (
            bool(self._partial_every)
            and now - self.last_decode_at >= self._partial_gap()
            and now - utterance.audio_start >= MIN_PARTIAL_SAMPLES
            and self._budget.allows_partial()
        )

    def _partial_gap(self) -> int:
        # At least twice the last decode time apart: decodes then use at most half of the
        # CPU, and the stream keeps up with real time on a slow or shared machine.
        return max(self._partial_every, int(2 * self._last_decode_ms * SAMPLE_RATE / 1000))

    def partial(self, utterance: Utterance, decoded: Decoded) -> list[ASREvent]:
        if not utterance.agreement.update(decoded.transcript.text):
            return []
        agreement = utterance.agreement
        return [Partial(utterance.utterance_id, agreement.stable_text, agreement.unstable_text)]

    def rollback(self, utterance: Utterance, text: str) -> list[ASREvent]:
        """A Rollback when `text` revises words a Partial already sent as stable."""
        if utterance.agreement.agree_with(text) is None:
            return []
        return [Rollback(utterance.utterance_id, utterance.agreement.stable_text)]

    def through(self, utterance: Utterance, speech_end: int, until: int) -> Transcript:
        """A transcript that heard all speech up to `speech_end`, reusing the last decode
        unless it heard no words and more audio is here now: the VAD ends a quiet word
        before its soft last syllable ("Hel-" of a caller's "Hello?" at -42 dBFS, which
        Whisper decoded as "I'm going to" and judged silence), and the padding after
        the speech end holds the rest."""
        last = utterance.last
        heard = last is not None and (bool(last.transcript.text) or last.covers_until >= until)
        if last is not None and last.covers_until >= speech_end and heard:
            return last.transcript
        return self.decode(utterance, until).transcript

    def decode(self, utterance: Utterance, until: int) -> Decoded:
        start = max(utterance.audio_start, until - WHISPER_MAX_SAMPLES)
        if self._before_decode is not None:
            self._before_decode()
        started_ns = time.perf_counter_ns()
        # The last decode's text is a good guess at this one's while the window has not slid.
        last = utterance.last
        guess = last.transcript.text if last and start == utterance.audio_start else ""
        decoder = self._decoders[utterance.model]
        transcript = decoder.decode(self._audio.read(start, until), guess)
        self._budget.record(started_ns, time.perf_counter_ns())
        utterance.last = Decoded(transcript, until)
        self._last_decode_ms = transcript.decode_ms
        self.last_decode_at = until
        return utterance.last
