from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from voxrelay.tts.audio import AudioChunk
from voxrelay.tts.config import TTSConfig
from voxrelay.tts.voice import Voice

REPLY = (
    "Sure, I can help with that. The weather today is sunny, with a high of 25 degrees, "
    "and a light breeze from the west. Enjoy your afternoon!"
)


def tokens(text: str) -> list[str]:
    # LLM-like deltas that split words and punctuation ("Su", "re,", " I").
    return re.findall(r"\s*\S{1,3}", text)


def samples(chunks: list[AudioChunk]) -> np.ndarray:
    return np.concatenate([chunk.pcm for chunk in chunks]).astype(np.float64)


def joint_jumps(chunks: list[AudioChunk]) -> tuple[np.ndarray, float]:
    """Sample step at each chunk joint, and the signal's typical step while voiced."""
    signal = samples(chunks)
    joints = np.cumsum([len(chunk.pcm) for chunk in chunks])[:-1]
    joints = joints[(joints > 0) & (joints < len(signal))]
    jumps = np.abs(signal[joints] - signal[joints - 1])
    steps = np.abs(np.diff(signal))
    voiced = np.abs(signal[1:]) > 0.02 * 32767
    return jumps, float(np.mean(steps[voiced]))


def test_chunks_are_int16_mono_with_one_last(voice: Voice) -> None:
    chunks = list(voice.synthesize_text(REPLY))
    assert all(chunk.pcm.dtype == np.int16 and chunk.pcm.ndim == 1 for chunk in chunks)
    assert all(chunk.sample_rate == 22050 for chunk in chunks)
    assert [chunk.is_last for chunk in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[0].text == "Sure, I can help with that."


def test_unspeakable_final_fragment_still_ends_the_reply(voice: Voice) -> None:
    (chunk,) = voice.synthesize("```python", final=True)
    assert chunk.is_last and len(chunk.pcm) == 0
    assert list(voice.synthesize("🎉", final=False)) == []


def test_streamed_tokens_match_whole_text_duration_without_clicks(whole_voice: Voice) -> None:
    whole = list(whole_voice.synthesize(REPLY, final=True))
    streamed = list(whole_voice.synthesize_stream(tokens(REPLY)))
    assert len({chunk.text for chunk in streamed if chunk.text}) >= 3  # really fragmented
    whole_s = sum(chunk.duration_s for chunk in whole)
    streamed_s = sum(chunk.duration_s for chunk in streamed)
    assert abs(streamed_s - whole_s) <= 0.10 * whole_s
    jumps, typical_step = joint_jumps(streamed)
    # Every joint sits on a faded edge or a pause, so it must be no larger than an
    # ordinary sample-to-sample step of the voiced signal (a click is many times that).
    assert jumps.max() <= typical_step, (jumps, typical_step)


def test_loudness_is_steady_across_short_and_long_fragments(voice: Voice) -> None:
    def rms_db(text: str) -> float:
        signal = samples(list(voice.synthesize(text, final=True)))
        voiced = signal[np.abs(signal) > 0.02 * 32767]
        return float(20 * np.log10(np.sqrt(np.mean(voiced**2))))

    short = rms_db("Sure, I can.")
    long = rms_db("The quick brown fox jumps over the lazy dog while the farmer watches his porch.")
    assert abs(short - long) < 3.0


@pytest.fixture(scope="module")
def quiet_config(config: TTSConfig) -> TTSConfig:
    # Noise off makes Piper deterministic, so voices at two rates say the same audio.
    # Sentences whole: the joints checked below are fragment and sentence edges.
    return dataclasses.replace(config, noise_scale=0.0, noise_w_scale=0.0, first_chunk_frames=0)


@pytest.fixture(scope="module")
def quiet_native_samples(quiet_config: TTSConfig) -> int:
    return sum(len(chunk.pcm) for chunk in Voice(quiet_config).synthesize_text(RATE_TEXT))


RATE_TEXT = "Hello there, how are you? I am fine."


@pytest.mark.parametrize("rate", [8000, 16000, 48000])
def test_output_rate_gives_the_expected_sample_count(
    quiet_config: TTSConfig, quiet_native_samples: int, rate: int
) -> None:
    chunks = list(
        Voice(dataclasses.replace(quiet_config, output_sample_rate=rate)).synthesize_text(RATE_TEXT)
    )
    assert all(chunk.sample_rate == rate for chunk in chunks)
    expected = quiet_native_samples * rate / 22050
    # Each fragment's stream rounds its length once: at most a sample per fragment.
    assert abs(sum(len(chunk.pcm) for chunk in chunks) - expected) <= len(chunks) + 1
    jumps, typical_step = joint_jumps(chunks)
    assert jumps.max() <= typical_step


def test_per_call_speed_shortens_speech_and_is_validated(config: TTSConfig) -> None:
    # Piper's duration noise off: the same text gives the same length every run, so the
    # ratios below measure the speed setting only (with noise, 0.75x gave 1.19 to 1.35).
    voice = Voice(dataclasses.replace(config, noise_scale=0.0, noise_w_scale=0.0))
    text = "The quick brown fox jumps over the lazy dog, twice."

    def seconds(speed: float | None) -> float:
        chunks = list(voice.synthesize(text, final=False, speed=speed))
        return sum(len(c.pcm) for c in chunks) / voice.sample_rate

    normal, fast, slow = seconds(None), seconds(1.5), seconds(0.75)
    assert 0.55 < fast / normal < 0.8, (fast, normal)
    assert 1.1 < slow / normal < 1.5, (slow, normal)  # 1.22 without noise
    with pytest.raises(ValueError, match="outside 0.5..2.0"):
        list(voice.synthesize(text, final=False, speed=2.5))
