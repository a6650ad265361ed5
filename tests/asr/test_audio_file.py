"""Audio files in: WAV by the standard library, the rest through FFmpeg (PyAV); clear
errors for what is not audio, on the API and on the CLI."""

from __future__ import annotations

import subprocess
import sys
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from tests.asr.clipdata import read_clip
from tests.asr.test_transcribe import normalize
from voxrelay.asr.audio_file import read_audio_file
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.transcribe import transcribe_file


def _encode(path: Path, samples: np.ndarray, rate: int, codec: str, sample_format: str) -> None:
    """Write mono `samples` (float32 in -1..1) with FFmpeg's `codec`."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.layout = "mono"
        if sample_format.startswith("s16"):
            data = (np.clip(samples, -1, 1) * 32767).astype("<i2")
        else:
            data = samples.astype(np.float32)
        frame = av.AudioFrame.from_ndarray(data.reshape(1, -1), format=sample_format, layout="mono")
        frame.sample_rate = rate
        frame.time_base = Fraction(1, rate)
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


@pytest.fixture(scope="module")
def speech(clips: Path) -> np.ndarray:
    return read_clip(clips / "goforward.raw")  # 16 kHz float32: "Go forward ten meters."


def test_flac_reads_back_sample_for_sample(speech: np.ndarray, tmp_path: Path) -> None:
    path = tmp_path / "speech.flac"
    _encode(path, speech, 16_000, "flac", "s16")
    audio = read_audio_file(path)
    expected = (np.clip(speech, -1, 1) * 32767).astype("<i2")
    assert (audio.sample_rate, audio.channels) == (16_000, 1)
    assert np.array_equal(audio.pcm16, expected)


def test_float_wav_reads_within_one_step(speech: np.ndarray, tmp_path: Path) -> None:
    # A 32-bit float WAV (what numpy and many editors write): the standard library's
    # reader refuses it, FFmpeg converts it.
    path = tmp_path / "speech.wav"
    _encode(path, speech, 16_000, "pcm_f32le", "flt")
    with pytest.raises(wave.Error), wave.open(str(path), "rb"):
        pass
    audio = read_audio_file(path)
    expected = np.clip(speech, -1, 1) * 32767
    assert audio.sample_rate == 16_000
    assert np.abs(audio.pcm16.astype(np.float32) - expected).max() <= 1.0


def test_mp3_at_44k_transcribes(speech: np.ndarray, models, tmp_path: Path) -> None:
    import soxr

    path = tmp_path / "speech.mp3"
    _encode(path, soxr.resample(speech, 16_000, 44_100), 44_100, "libmp3lame", "s16p")
    assert read_audio_file(path).sample_rate == 44_100
    text = transcribe_file(path, ASRConfig(model="tiny.en"), models=models)
    assert normalize(text) == "go forward ten meters"


def test_what_is_not_audio_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing.wav does not exist"):
        read_audio_file(tmp_path / "missing.wav")
    text = tmp_path / "notes.wav"
    text.write_text("hello\n")  # shorter than a RIFF header
    with pytest.raises(ValueError, match="notes.wav is not an audio file that can be read"):
        read_audio_file(text)
    noise = tmp_path / "noise.mp3"
    noise.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ValueError, match="noise.mp3 is not an audio file that can be read"):
        read_audio_file(noise)
    empty = tmp_path / "empty.wav"
    with wave.open(str(empty), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16_000)
    with pytest.raises(ValueError, match="empty.wav holds no audio samples"):
        read_audio_file(empty)


@pytest.mark.parametrize("command", [["transcribe"], ["run", "--output", "out.wav", "--input"]])
def test_cli_says_what_is_wrong_without_a_traceback(command: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.wav"
    bad.write_text("hello\n")
    proc = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", *command, str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"voxrelay: error: {bad} is not an audio file that can be read")
