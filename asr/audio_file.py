"""Audio files in, for the file forms (`voxrelay run`, `transcribe`, `run_file`).

A 16-bit PCM WAV is read by the standard library. Anything else goes to FFmpeg through
PyAV, faster-whisper's own decoder (so no new dependency): FLAC, MP3, Ogg/Opus, M4A,
24-bit, 32-bit float and 8-bit WAV. The rate stays the file's (the ASR resamples any
rate); more than two channels are mixed down to stereo, which the ASR mixes to mono.
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_CHANNELS = 2
RAW_SAMPLE_RATE = 16_000  # pocketsphinx-style .raw clips: 16 kHz s16le mono


@dataclass(frozen=True, slots=True)
class AudioFile:
    pcm16: np.ndarray  # (samples * channels,) int16, interleaved
    sample_rate: int
    channels: int


def read_audio_file(path: Path, raw_s16le_16k: bool = False) -> AudioFile:
    """The file's audio as PCM16 at its own rate; ValueError naming the file if it is
    missing, not audio FFmpeg can decode, or holds no samples. Headerless s16le 16 kHz
    mono is read as such when `raw_s16le_16k` is set or the name ends in `.raw`."""
    if not path.is_file():
        raise ValueError(f"input file {path} does not exist")
    if raw_s16le_16k or path.suffix == ".raw":
        audio = AudioFile(np.fromfile(path, dtype="<i2"), RAW_SAMPLE_RATE, 1)
    else:
        audio = _read_pcm16_wav(path) or _decode(path)
    if not audio.pcm16.size:
        raise ValueError(f"{path} holds no audio samples")
    return audio


def _read_pcm16_wav(path: Path) -> AudioFile | None:
    try:
        with wave.open(str(path), "rb") as wav:
            if wav.getsampwidth() != 2 or wav.getnchannels() > MAX_CHANNELS:
                return None
            frames = wav.readframes(wav.getnframes())
            pcm16 = np.frombuffer(frames, dtype="<i2").copy()
            return AudioFile(pcm16, wav.getframerate(), wav.getnchannels())
    except (wave.Error, EOFError):
        # Not a PCM WAV (a float one, WAVE_FORMAT_EXTENSIBLE, another format, or a file
        # shorter than a RIFF header): FFmpeg's turn, which also names what is wrong.
        return None


def _decode(path: Path) -> AudioFile:
    import av  # FFmpeg's libraries load only for a file that needs them

    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise ValueError(f"{path} has no audio stream")
            stream = container.streams.audio[0]
            channels = 1 if stream.channels == 1 else MAX_CHANNELS
            rate = stream.sample_rate
            resampler = av.AudioResampler(
                format="s16", layout="mono" if channels == 1 else "stereo", rate=rate
            )
            chunks: list[np.ndarray] = []
            for frame in container.decode(stream):
                chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
            chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    except av.FFmpegError as error:
        raise ValueError(
            f"{path} is not an audio file that can be read (WAV, FLAC, MP3, Ogg, M4A, ...): {error}"
        ) from None
    pcm16 = np.concatenate(chunks).astype("<i2") if chunks else np.zeros(0, dtype="<i2")
    return AudioFile(pcm16, rate, channels)
