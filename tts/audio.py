"""The TTS output record and the sample-level shaping applied to every fragment."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Below about -50 dBFS Piper's output is room tone between words, not speech; soft
# onsets ("f", "h") start above it, so trimming at this level keeps them.
SILENCE_LEVEL = 0.003
# Margins kept around the voiced part so trimming never clips an onset or a decay.
LEAD_KEEP_MS = 15.0
TAIL_KEEP_MS = 40.0


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """A piece of synthesized speech, ready to play or to put in a ring record.

    pcm is int16 mono, shape (samples,). is_last marks the end of a reply: the chunk
    that carries it may be short or empty (it flushes the resampler's tail).
    """

    pcm: np.ndarray
    sample_rate: int
    text: str
    is_last: bool

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate


def trim_silence(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Cut Piper's leading/trailing silence (40 ms / 100-200 ms) down to fixed margins.

    Piper's own silence varies with the final punctuation; trimming it makes the pause
    at each joint exactly what the config asks for, and the leading trim takes ~25 ms
    off the time to first audio.
    """
    voiced = np.flatnonzero(np.abs(audio) > SILENCE_LEVEL)
    if len(voiced) == 0:
        return audio[:0]
    start = max(0, int(voiced[0]) - int(LEAD_KEEP_MS * sample_rate / 1000))
    stop = min(len(audio), int(voiced[-1]) + 1 + int(TAIL_KEEP_MS * sample_rate / 1000))
    return audio[start:stop]


def fade_edges(audio: np.ndarray, fade_samples: int) -> np.ndarray:
    """Raised-cosine fade in and out, so a joint to silence or to the next fragment
    starts and ends at zero (no click). Returns a new array."""
    faded = audio.astype(np.float32, copy=True)
    fade_samples = min(fade_samples, len(faded) // 2)
    if fade_samples > 0:
        ramp = 0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, fade_samples, dtype=np.float32))
        faded[:fade_samples] *= ramp
        faded[-fade_samples:] *= ramp[::-1]
    return faded


def to_int16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)
