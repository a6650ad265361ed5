"""Piper voice wrapper: fragments in, evenly loud, click-free AudioChunks out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import numpy as np
import soxr
from piper import PiperVoice, SynthesisConfig
from piper.config import PiperConfig

from voxrelay.tts.audio import AudioChunk, SentenceShaper, to_int16
from voxrelay.tts.chunker import Chunker
from voxrelay.tts.config import TTSConfig
from voxrelay.tts.text import clean_for_speech
from voxrelay.tts.vocoder import SplitVoiceModel, onnx_session

_SENTENCE_END = ".?!"
_CLAUSE_END = ",;:"
_WARMUP_TEXT = "Hello there."


class Voice:
    """A loaded Piper voice. Not thread-safe: one Voice per TTS worker.

    Calls share no state, so one Voice can serve fragments of several sessions in
    any interleaving. A reply is its fragments in order, the last with final=True.
    """

    def __init__(self, config: TTSConfig) -> None:
        self.config = config
        piper_config = PiperConfig.from_dict(
            json.loads((config.voice_dir / "voice.onnx.json").read_text(encoding="utf-8"))
        )
        # With chunking the model runs as two sessions (tts/vocoder.py) and PiperVoice
        # only phonemizes; it needs a session all the same, so it gets the front half.
        self._split: SplitVoiceModel | None = None
        if config.first_chunk_frames:
            self._split = SplitVoiceModel(config.voice_dir / "voice.onnx", config.num_threads)
            session = self._split.front_session
        else:
            session = onnx_session(config.voice_dir / "voice.onnx", config.num_threads)
        self._piper = PiperVoice(session=session, config=piper_config)
        self.native_sample_rate: int = piper_config.sample_rate
        self.sample_rate: int = config.output_sample_rate or self.native_sample_rate
        # Peak normalisation per sentence would make a short "Sure," as loud as a long
        # sentence's loudest syllable; a fixed gain keeps loudness steady across joints.
        self._trained_length_scale = piper_config.length_scale
        self._syn_configs: dict[float, SynthesisConfig] = {}  # by speed; a handful at most
        self._syn_config = self._syn_config_for(config.speed)
        self._gain = float(10.0 ** (config.gain_db / 20.0))
        self._fade_samples = round(config.fade_ms * self.native_sample_rate / 1000)
        # The first onnxruntime run allocates and plans; pay that here, not on the
        # first reply (it roughly doubles the first call's latency).
        for _ in self.synthesize(_WARMUP_TEXT, final=True):
            pass

    def synthesize(
        self, fragment: str, *, final: bool, speed: float | None = None
    ) -> Iterator[AudioChunk]:
        """Yield audio for one fragment, one chunk per sentence as soon as it is ready.

        With final=True the fragment ends the reply: its last chunk has is_last=True
        (an empty chunk when nothing in the fragment is speakable). Stopping the
        iteration early aborts the fragment; nothing carries over to the next call.
        `speed` (0.5..2.0) overrides `TTSConfig.speed` for this fragment: a session's own
        setting.
        """
        speed = self.config.speed if speed is None else speed
        syn_config = self._syn_config_for(speed)
        text = clean_for_speech(fragment)
        # Phonemize up front (cheap, ~1 ms) so the last sentence is known without
        # waiting for the model: it carries is_last and flushes the resampler.
        sentences = (
            [phonemes for phonemes in self._piper.phonemize(text) if phonemes] if text else []
        )
        if not sentences:
            if final:
                empty = np.zeros(0, dtype=np.int16)
                yield AudioChunk(pcm=empty, sample_rate=self.sample_rate, text="", is_last=True)
            return
        # One resampler stream per fragment: its filter state runs across the
        # fragment's sentences, and none leaks into the next fragment, which may belong
        # to another session or to a turn that barge-in cancelled. Fragments start and
        # end on faded zeros, so separate streams join without a step.
        resampler = self._new_resampler()
        for index, phonemes in enumerate(sentences):
            is_last_sentence = index == len(sentences) - 1
            # Pauses keep their share of the speech: faster speech, shorter pauses.
            pause_ms = 0.0 if final and is_last_sentence else self._pause_ms(phonemes) / speed
            shaper = SentenceShaper(self.native_sample_rate, self._gain, self._fade_samples)
            pause_samples = round(pause_ms * self.native_sample_rate / 1000)
            # Only a fragment's first sentence is worth chunking: the later ones are
            # synthesized while it plays.
            chunk_frames = self.config.first_chunk_frames if index == 0 else 0
            phoneme_ids = self._piper.phonemes_to_ids(phonemes)
            for piece, last_piece in self._sentence_audio(phoneme_ids, syn_config, chunk_frames):
                shaped = shaper.push(piece, last=last_piece, pause_samples=pause_samples)
                last = is_last_sentence and last_piece
                if resampler is not None:
                    shaped = resampler.resample_chunk(shaped, last=last)
                if len(shaped) or last_piece:
                    yield AudioChunk(
                        pcm=to_int16(shaped),
                        sample_rate=self.sample_rate,
                        text=text,
                        is_last=final and last,
                    )

    def _sentence_audio(
        self, phoneme_ids: list[int], syn_config: SynthesisConfig, first_chunk_frames: int
    ) -> Iterator[tuple[np.ndarray, bool]]:
        """One sentence's raw audio, in chunks when the model is split: (audio, last)."""
        if self._split is None:
            audio = self._piper.phoneme_ids_to_audio(phoneme_ids, syn_config)
            assert isinstance(audio, np.ndarray)  # a tuple only with alignments
            yield audio, True
            return
        latents = self._split.latents(self._feeds(phoneme_ids, syn_config))
        yield from self._split.audio(latents, first_chunk_frames)

    def synthesize_stream(self, deltas: Iterable[str]) -> Iterator[AudioChunk]:
        """Chunk streamed LLM deltas and synthesize each fragment as it is released."""
        chunker = Chunker(self.config)
        for delta in deltas:
            for fragment in chunker.push(delta):
                yield from self.synthesize(fragment, final=False)
        tail = chunker.flush()
        for index, fragment in enumerate(tail):
            yield from self.synthesize(fragment, final=index == len(tail) - 1)
        if not tail:
            yield from self.synthesize("", final=True)

    def synthesize_text(self, text: str) -> Iterator[AudioChunk]:
        """Synthesize a whole reply, fragment by fragment (the sequential baseline)."""
        return self.synthesize_stream([text])

    def _syn_config_for(self, speed: float) -> SynthesisConfig:
        if not 0.5 <= speed <= 2.0:
            raise ValueError(f"speed={speed} is outside 0.5..2.0 (1.0 = normal tempo)")
        if speed not in self._syn_configs:
            # Piper's length_scale stretches every phoneme's duration: 1/speed of trained.
            self._syn_configs[speed] = SynthesisConfig(
                length_scale=self._trained_length_scale / speed,
                noise_scale=self.config.noise_scale,
                noise_w_scale=self.config.noise_w_scale,
                normalize_audio=False,
            )
        return self._syn_configs[speed]

    def _pause_ms(self, phonemes: list[str]) -> float:
        # espeak keeps the sentence's closing punctuation as its last phoneme(s).
        last = "".join(phonemes).rstrip()[-1:]
        if last and last in _SENTENCE_END:
            return self.config.sentence_pause_ms
        if last and last in _CLAUSE_END:
            return self.config.clause_pause_ms
        # Cut mid-clause (word cap): any pause would be heard as a stumble.
        return 0.0

    def _feeds(self, phoneme_ids: list[int], syn_config: SynthesisConfig) -> dict[str, np.ndarray]:
        """The model's inputs for one sentence, as PiperVoice.phoneme_ids_to_audio builds
        them (a single-speaker voice: no speaker id)."""
        scales = [syn_config.noise_scale, syn_config.length_scale, syn_config.noise_w_scale]
        defaults = [
            self._piper.config.noise_scale,
            self._piper.config.length_scale,
            self._piper.config.noise_w_scale,
        ]
        return {
            "input": np.array([phoneme_ids], dtype=np.int64),
            "input_lengths": np.array([len(phoneme_ids)], dtype=np.int64),
            "scales": np.array(
                [d if v is None else v for v, d in zip(scales, defaults, strict=True)],
                dtype=np.float32,
            ),
        }

    def _new_resampler(self) -> soxr.ResampleStream | None:
        if self.sample_rate == self.native_sample_rate:
            return None
        return soxr.ResampleStream(self.native_sample_rate, self.sample_rate, 1, dtype="float32")
