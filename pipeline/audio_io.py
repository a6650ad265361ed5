"""Reading and writing audio files for the file-in/file-out forms (CLI, demo, bench)."""

from __future__ import annotations

import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from voxrelay.asr.audio_file import read_audio_file


@dataclass(frozen=True, slots=True)
class Clip:
    pcm16: np.ndarray  # (samples * channels,) int16, interleaved
    sample_rate: int
    channels: int

    @property
    def duration_s(self) -> float:
        return len(self.pcm16) / self.channels / self.sample_rate

    def frames(self, frame_ms: int) -> list[bytes]:
        step = self.sample_rate * frame_ms // 1000 * self.channels
        data = self.pcm16.tobytes()
        return [data[i : i + step * 2] for i in range(0, len(data), step * 2)]

    def with_silence(self, seconds: float) -> Clip:
        pad = np.zeros(int(seconds * self.sample_rate) * self.channels, dtype=np.int16)
        return Clip(np.concatenate([self.pcm16, pad]), self.sample_rate, self.channels)

    def mono_float(self) -> np.ndarray:
        samples = self.pcm16.astype(np.float32) / 32768.0
        return samples.reshape(-1, self.channels).mean(axis=1) if self.channels > 1 else samples

    def paced(self, frame_ms: int, realtime: bool = True) -> Iterator[tuple[bytes, int]]:
        """(frame, arrival_ns) at a microphone's pace, for the in-process yardsticks. A
        frame due while the caller was busy comes at once: late, as live audio would be
        queued, never dropped."""
        start = time.perf_counter()
        for index, frame in enumerate(self.frames(frame_ms)):
            delay = start + index * frame_ms / 1000 - time.perf_counter()
            if realtime and delay > 0:
                time.sleep(delay)
            yield frame, time.perf_counter_ns()


def read_clip(path: Path) -> Clip:
    """An audio file (WAV, FLAC, MP3, ...) or a 16 kHz s16le `.raw`: `asr.audio_file`."""
    audio = read_audio_file(path)
    return Clip(audio.pcm16, audio.sample_rate, audio.channels)


def write_wav(path: Path, pcm16: bytes, sample_rate: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm16)


class OutputResampler:
    """Streaming conversion of reply audio to the rate a sink wants."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16")
            if in_rate != out_rate
            else None
        )

    def convert(self, pcm16: bytes, last: bool = False) -> bytes:
        if self._stream is None:
            return pcm16
        samples = np.frombuffer(pcm16, dtype="<i2")
        return bytes(self._stream.resample_chunk(samples, last=last).tobytes())
