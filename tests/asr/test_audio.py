import numpy as np
import pytest
import soxr

from voxrelay.asr.audio import SUPPORTED_RATES, AudioConverter, to_mono_float32


def tone(rate: int, seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def stream_convert(converter: AudioConverter, audio: np.ndarray, frame: int) -> np.ndarray:
    parts = [converter.convert(audio[i : i + frame]) for i in range(0, audio.size, frame)]
    return np.concatenate([*parts, converter.flush()])


@pytest.mark.parametrize("rate", SUPPORTED_RATES)
def test_streaming_output_length_matches_duration(rate: int) -> None:
    audio = tone(rate, 1.0)
    out = stream_convert(AudioConverter(rate, 1), audio, frame=rate // 50)
    assert out.dtype == np.float32
    assert abs(out.size - 16_000) <= 2


def test_frame_boundaries_add_no_artifacts() -> None:
    # One resampler across 20 ms frames must equal resampling the whole signal at once.
    audio = tone(48_000, 0.5)
    streamed = stream_convert(AudioConverter(48_000, 1), audio, frame=960)
    whole = soxr.resample(audio, 48_000, 16_000, quality="HQ")
    n = min(streamed.size, whole.size)
    assert np.max(np.abs(streamed[:n] - whole[:n])) < 1e-4


def test_pcm16_bytes_and_int16_arrays_agree() -> None:
    samples = np.array([0, 16384, -16384, 32767, -32768], np.int16)
    from_bytes = to_mono_float32(samples.astype("<i2").tobytes(), 1)
    from_array = to_mono_float32(samples, 1)
    np.testing.assert_array_equal(from_bytes, from_array)
    np.testing.assert_allclose(from_bytes, [0.0, 0.5, -0.5, 32767 / 32768, -1.0])


def test_stereo_is_averaged_interleaved_and_2d() -> None:
    left = np.array([0.2, 0.4], np.float32)
    right = np.array([0.0, -0.4], np.float32)
    interleaved = np.stack([left, right], axis=1).reshape(-1)
    np.testing.assert_allclose(to_mono_float32(interleaved, 2), [0.1, 0.0])
    np.testing.assert_allclose(to_mono_float32(np.stack([left, right], axis=1), 2), [0.1, 0.0])
    pcm = (np.stack([left, right], axis=1) * 32768).astype("<i2").tobytes()
    np.testing.assert_allclose(to_mono_float32(pcm, 2), [0.1, 0.0], atol=1e-4)


def test_stereo_44k_pcm_stream() -> None:
    mono = tone(44_100, 0.5)
    pcm = (np.repeat(mono, 2) * 32767).astype("<i2").tobytes()
    converter = AudioConverter(44_100, 2)
    frame_bytes = 441 * 2 * 2
    out = np.concatenate(
        [converter.convert(pcm[i : i + frame_bytes]) for i in range(0, len(pcm), frame_bytes)]
        + [converter.flush()]
    )
    assert abs(out.size - 8000) <= 2
    assert 0.45 < np.max(np.abs(out)) < 0.55


@pytest.mark.parametrize(
    ("rate", "channels", "message"),
    [(11_025, 1, "sample rate"), (16_000, 3, "channel"), (16_000, 0, "channel")],
)
def test_bad_format_is_rejected(rate: int, channels: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AudioConverter(rate, channels)


def test_bad_frames_are_rejected() -> None:
    with pytest.raises(ValueError, match="not a whole number"):
        AudioConverter(16_000, 1).convert(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="not a whole number"):
        AudioConverter(16_000, 2).convert(b"\x00\x01")
    with pytest.raises(ValueError, match="not divisible"):
        AudioConverter(16_000, 2).convert(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        AudioConverter(16_000, 1).convert(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="PCM16 bytes or a numpy array"):
        AudioConverter(16_000, 1).convert([0, 1])  # type: ignore[arg-type]


def test_convert_after_flush_is_an_error() -> None:
    converter = AudioConverter(8000, 1)
    converter.flush()
    with pytest.raises(ValueError, match="flushed"):
        converter.convert(np.zeros(8, np.float32))
