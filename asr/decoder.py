"""One Whisper decode of an utterance: log-mel -> CTranslate2 encoder -> text decoder (our
own, asr/textdecoder.py, greedy and checking a draft; or CTranslate2's, for beam search).

We call CTranslate2 directly instead of `WhisperModel.transcribe` because transcribe always
encodes a full 30 s window (3000 mel frames), which is ~75% of the decode time for a short
utterance. CTranslate2 accepts fewer frames; the encoder cost is then roughly linear in
them. Whisper was only trained on 30 s windows, though: with too little trailing silence
it stops seeing an end and loops ("ten of clubs ten of clubs ..."). So every decode gets
at least `encoder_context_s` of input and 2 s of silence after the speech, a tight
token budget, and a loop check (budget hit, gzip ratio, the text starting over, or a
word group stuck on repeat); a decode that looks like a loop is redone with the full
window and a generous budget, and a group still stuck after that is kept once.
On our clips 1 decode in 11 is redone at 8 s (docs/asr.md).
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass

import ctranslate2
import numpy as np
import torch
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.encoder import AudioEncoder, load_audio_encoder
from voxrelay.asr.textdecoder import Marks, TextDecoder, load_text_decoder
from voxrelay.asr.threads import PLACEMENT

SAMPLE_RATE = 16_000
HOP_SAMPLES = 160  # one mel frame per 10 ms
FULL_FRAMES = 3000  # Whisper's 30 s window
# Silence after the speech so the model sees the utterance end (see module docstring).
TRAILING_CONTEXT_FRAMES = 200
# faster-whisper's defaults for "this decode is a loop" and "this was not speech".
COMPRESSION_RATIO_LOOP = 2.4
NO_SPEECH_PROB = 0.6
LOG_PROB_FLOOR = -1.0
# Token budget: fast speech is ~4-5 tokens/s; a decode hitting this budget is a loop.
# The full-window retry gets the generous budget, so a tight one only costs a redo.
TOKENS_PER_S = 7
MIN_TOKENS = 12
RETRY_TOKENS_PER_S = 10
RETRY_MIN_TOKENS = 24
# A loop that restarts the utterance repeats its first words ("go forward ten meters go
# forward ..."); this many words in a row from the start, found again later, is one.
RESTART_WORDS = 3
# A loop that sticks on its last words repeats them back to back ("voice assistant,
# assistant, assistant, assistant"); this many copies in a row of one 1-4 word group is
# one. Three ("no, no, no") is left alone: people say that.
STUCK_COPIES = 4
STUCK_MAX_WORDS = 4
MAX_TOKENS = 440  # Whisper's text context is 448 including the prompt
# A loop is first retried in a window this much longer: whether greedy Whisper loops
# into the padding is chaotic in the window's length, and a somewhat longer one mostly
# breaks it at a quarter of the full window's encoder cost ("33-4692" looped at 500 and
# 800 frames, read right at 1000-2000 in 200-420 ms, at 3000 in 840; docs/asr.md,
# "Session 15"). Only if that loops too does the full window decide.
RETRY_WINDOW_SCALE = 1.5


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    decode_ms: float
    encoder_frames: int
    retried_full: bool  # the shortened context looped and the full window was used
    # Whisper's own P(the sentence closes after the last word) (asr/textdecoder.py);
    # None from CTranslate2's decoder.
    closing_prob: float | None = None


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def _looped(text: str, hit_budget: bool) -> bool:
    return (
        hit_budget
        or _compression_ratio(text) > COMPRESSION_RATIO_LOOP
        or _starts_over(text)
        or _stuck_run(_normalized_words(text)) is not None
    )


def _starts_over(text: str) -> bool:
    """Whether the text repeats its own opening words later on (a restart loop)."""
    words = _normalized_words(text)
    size = RESTART_WORDS if len(words) >= 2 * RESTART_WORDS else 2
    if len(words) < 2 * size:
        return False
    opening = words[:size]
    return any(words[i : i + size] == opening for i in range(1, len(words) - size + 1))


def _stuck_run(words: list[str]) -> tuple[int, int, int] | None:
    """The first run of >= STUCK_COPIES back-to-back copies of a 1-4 word group, as
    (start, group size, copies), or None."""
    for start in range(len(words)):
        for size in range(1, STUCK_MAX_WORDS + 1):
            group = words[start : start + size]
            if len(group) < size:
                break
            copies = 1
            while words[start + copies * size : start + (copies + 1) * size] == group:
                copies += 1
            if copies >= STUCK_COPIES:
                return start, size, copies
    return None


def _normalized_words(text: str) -> list[str]:
    return [w.strip(".,!?;:").lower() for w in text.split()]


def _collapse_stuck(text: str) -> str:
    """Keep one copy of each stuck run (see STUCK_COPIES), punctuation of the last copy."""
    words = text.split()
    while (run := _stuck_run(_normalized_words(" ".join(words)))) is not None:
        start, size, copies = run
        words = words[:start] + words[start + (copies - 1) * size :]
    return " ".join(words)


def log_mel(model: WhisperModel, audio: np.ndarray, frames: int) -> np.ndarray:
    """(1, 80, frames) float32, contiguous: the log-mel of `audio` (16 kHz, at most
    `frames` hops) and the silence padding after it, as Whisper was trained."""
    padded = np.zeros(frames * HOP_SAMPLES, np.float32)
    padded[: audio.size] = audio
    return np.ascontiguousarray(model.feature_extractor(padded, padding=0)[None, :, :frames])


class WhisperDecoder:
    """Stateless per call; one per stream is cheap (the model is shared)."""

    def __init__(self, model: WhisperModel, config: ASRConfig) -> None:
        self._model = model
        self._beam_size = config.beam_size
        self._spread_threads = config.spread_threads
        # Each model's CTranslate2 runtime has its own threads ("auto" loads two).
        self._encoder_pool = f"encoder {config.model}"
        self._min_frames = int(config.encoder_context_s * SAMPLE_RATE / HOP_SAMPLES)
        self._tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en"
        )
        self._prompt = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._marks = Marks(
            self._mark_ids(".", "?", "!"), self._mark_ids(",", "...", " ...", "-", " -", ";")
        )
        self._text_decoder: TextDecoder | None = None
        self._audio_encoder: AudioEncoder | None = None
        if config.text_decoder == "native":
            from voxrelay.pipeline.models import asset_path

            self._text_decoder = load_text_decoder(str(asset_path(config.model)))
            if config.encoder == "bfloat16":
                self._audio_encoder = load_audio_encoder(str(asset_path(config.model)))

    def decode(self, audio: np.ndarray, guess: str = "") -> Transcript:
        """Transcribe one utterance (16 kHz mono float32, at most 30 s). `guess`: what the
        last decode of this utterance heard; the native decoder checks it in one batched
        pass and steps only where it fails (asr/textdecoder.py). It changes the cost, not
        the text; CTranslate2 ignores it."""
        assert audio.ndim == 1 and audio.size <= FULL_FRAMES * HOP_SAMPLES, audio.shape
        started = time.perf_counter()
        if self._spread_threads:
            PLACEMENT.spread()
        audio_frames = math.ceil(audio.size / HOP_SAMPLES)
        frames = min(FULL_FRAMES, max(self._min_frames, audio_frames + TRAILING_CONTEXT_FRAMES))
        seconds = audio.size / SAMPLE_RATE
        max_tokens = min(MAX_TOKENS, MIN_TOKENS + int(TOKENS_PER_S * seconds))
        draft = self._tokenizer.encode(" " + guess) if guess and self._text_decoder else []
        text, hit_budget, closing = self._run(audio, frames, max_tokens, draft)
        retried = False
        looped = frames < FULL_FRAMES and _looped(text, hit_budget)
        if looped:
            retry_tokens = min(MAX_TOKENS, RETRY_MIN_TOKENS + int(RETRY_TOKENS_PER_S * seconds))
            longer = int(frames * RETRY_WINDOW_SCALE)
            if longer < FULL_FRAMES:
                text, hit_budget, closing = self._run(audio, longer, retry_tokens, [])
                frames, looped = longer, _looped(text, hit_budget)
        if looped:
            text, _, closing = self._run(audio, FULL_FRAMES, retry_tokens, [])
            frames, retried = FULL_FRAMES, True
        # Even the full window can stick on a short utterance's last word; the copies
        # are never speech worth passing on.
        text = _collapse_stuck(text)
        decode_ms = (time.perf_counter() - started) * 1000
        return Transcript(text.strip(), decode_ms, frames, retried, closing if text else None)

    def _mark_ids(self, *marks: str) -> tuple[int, ...]:
        """The single-token ids of `marks` in Whisper's vocabulary."""
        ids = (self._tokenizer.encode(mark) for mark in marks)
        return tuple(sorted({only for only, *rest in ids if not rest}))

    def _run(
        self, audio: np.ndarray, frames: int, max_tokens: int, draft: list[int]
    ) -> tuple[str, bool, float | None]:
        """(text, whether the token budget was hit, Whisper's closing probability)."""
        mel = log_mel(self._model, audio, frames)
        if self._audio_encoder is not None:
            encoder = self._audio_encoder
            # PyTorch's threads: the text decoder's pool ("text decoder", below).
            hidden = PLACEMENT.observe("text decoder", lambda: encoder(mel))
            return self._run_native(hidden, max_tokens, draft)
        features = ctranslate2.StorageView.from_array(mel)
        if self._text_decoder is not None:
            encoded = PLACEMENT.observe(
                self._encoder_pool, lambda: self._model.model.encode(features, to_cpu=True)
            )
            hidden = torch.from_numpy(np.array(encoded)[0])  # (frames / 2, d), a copy
            return self._run_native(hidden, max_tokens, draft)
        encoded = PLACEMENT.observe(
            self._encoder_pool, lambda: self._model.model.encode(features, to_cpu=False)
        )
        result = self._model.model.generate(
            encoded,
            [self._prompt],
            beam_size=self._beam_size,
            max_length=max_tokens,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
        )[0]
        tokens = result.sequences_ids[0]
        sum_logprob = result.scores[0] * len(tokens)  # the score is length-normalised
        return (*self._judge(tokens, sum_logprob, result.no_speech_prob, max_tokens), None)

    def _run_native(
        self, hidden: torch.Tensor, max_tokens: int, draft: list[int]
    ) -> tuple[str, bool, float | None]:
        """The text decoder on the encoder's states `hidden` (frames / 2, d), float32 from
        CTranslate2, bfloat16 from asr/encoder.py."""
        assert self._text_decoder is not None
        text_decoder = self._text_decoder
        result = PLACEMENT.observe(
            "text decoder",
            lambda: text_decoder.decode(
                hidden,
                self._prompt,
                draft,
                max_tokens,
                self._tokenizer.eot,
                self._tokenizer.no_speech,
                self._marks,
            ),
        )
        text, hit_budget = self._judge(
            result.tokens, result.sum_logprob, result.no_speech_prob, max_tokens
        )
        return text, hit_budget, result.closing_prob

    def _judge(
        self, tokens: list[int], sum_logprob: float, no_speech_prob: float, max_tokens: int
    ) -> tuple[str, bool]:
        """(text, whether the token budget was hit); "" for silence by faster-whisper's
        rule: likely no speech and not confidently decoded."""
        avg_logprob = sum_logprob / (len(tokens) + 1)
        if no_speech_prob > NO_SPEECH_PROB and avg_logprob < LOG_PROB_FLOOR:
            return "", False
        return self._tokenizer.decode(tokens), len(tokens) + len(self._prompt) >= max_tokens
