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


def to_int16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


class SentenceShaper:
    """One sentence's audio shaped for joining: gain, Piper's leading/trailing silence
    (40 ms / 100-200 ms) cut to fixed margins, a raised-cosine fade at both edges, then
    its pause. Audio may arrive in chunks (tts/vocoder.py); the samples are the same as
    for the sentence in one piece, given out as soon as they are known.

    Piper's own silence varies with the final punctuation; trimming it makes the pause at
    each joint exactly what the config asks for, and the leading trim takes ~25 ms off
    the time to first audio. The fades make every joint start and end at zero (no
    click). Leading silence is held until the first voiced sample; the last
    `fade_samples` of each chunk are held back so the fade-out always has them; the
    trailing trim is done on the last chunk, counting the silence given out before it.
    """

    def __init__(self, sample_rate: int, gain: float, fade_samples: int) -> None:
        self._gain = gain
        self._fade = fade_samples
        self._lead_keep = int(LEAD_KEEP_MS * sample_rate / 1000)
        self._tail_keep = int(TAIL_KEEP_MS * sample_rate / 1000)
        self._held = np.zeros(0, dtype=np.float32)
        self._started = False  # a voiced sample has been seen
        self._faded_in = False
        self._since_voiced = 0  # samples given out or held since the last voiced one

    def push(self, audio: np.ndarray, *, last: bool, pause_samples: int = 0) -> np.ndarray:
        """Shaped float32 audio ready to play (maybe empty); the pause follows `last`."""
        pause = np.zeros(pause_samples if last else 0, dtype=np.float32)
        pending = np.concatenate([self._held, audio.astype(np.float32) * self._gain])
        self._held = pending[:0]
        voiced = np.flatnonzero(np.abs(pending) > SILENCE_LEVEL)
        if not self._started:
            if len(voiced) == 0:
                self._held = pending if not last else pending[:0]
                return pause
            start = max(0, int(voiced[0]) - self._lead_keep)
            pending, voiced = pending[start:], voiced - start
            self._started = True
        if len(voiced):
            self._since_voiced = len(pending) - int(voiced[-1]) - 1
        else:
            self._since_voiced += len(pending)
        if last:
            stop = len(pending) - max(0, self._since_voiced - self._tail_keep)
            out = pending[:stop].copy()
            fade = min(self._fade, len(out) // 2) if not self._faded_in else self._fade
            self._fade_in(out, fade)
            if fade > 0 and len(out) >= fade:
                out[-fade:] *= _ramp(fade)[::-1]
            return np.concatenate([out, pause])
        # Not the last chunk: keep its last fade_samples for the fade-out that may come.
        keep = min(self._fade, len(pending))
        out, self._held = pending[: len(pending) - keep].copy(), pending[len(pending) - keep :]
        self._fade_in(out, self._fade)
        return out

    def _fade_in(self, out: np.ndarray, fade: int) -> None:
        if self._faded_in or fade <= 0 or len(out) == 0:
            return
        # The whole fade-in lies in the first piece given out (pieces are >= ~0.1 s).
        fade = min(fade, len(out))
        out[:fade] *= _ramp(fade)
        self._faded_in = True


def _ramp(samples: int) -> np.ndarray:
    return 0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, samples, dtype=np.float32))
