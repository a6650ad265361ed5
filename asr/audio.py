"""Input conversion: PCM16 bytes or float arrays, mono or interleaved stereo, at common
rates -> 16 kHz mono float32, through one streaming resampler per stream so that frame
boundaries add no clicks."""

from __future__ import annotations

import numpy as np

from voxrelay.asr.resample import OUT_RATE, StreamingResampler

TARGET_RATE = OUT_RATE
SUPPORTED_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
SUPPORTED_CHANNELS = (1, 2)

AudioInput = bytes | bytearray | memoryview | np.ndarray


def check_format(sample_rate: int, channels: int) -> None:
    """Raise ValueError unless (sample_rate, channels) is a format we accept."""
    if sample_rate not in SUPPORTED_RATES:
        raise ValueError(f"unsupported sample rate {sample_rate} Hz; use one of {SUPPORTED_RATES}")
    if channels not in SUPPORTED_CHANNELS:
        raise ValueError(f"unsupported channel count {channels}; send mono (1) or stereo (2)")


def to_mono_float32(data: AudioInput, channels: int) -> np.ndarray:
    """Decode one frame to mono float32 in [-1, 1] at its own rate.

    bytes-like input is little-endian PCM16, interleaved if stereo. Arrays may be int16 or
    float (already in [-1, 1]), 1-D interleaved or 2-D (frames, channels).
    """
    if isinstance(data, bytes | bytearray | memoryview):
        raw = memoryview(data).cast("B")
        frame_bytes = 2 * channels
        if len(raw) % frame_bytes:
            raise ValueError(
                f"PCM16 frame of {len(raw)} bytes is not a whole number of "
                f"{channels}-channel samples ({frame_bytes} bytes each)"
            )
        samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) * (1.0 / 32768.0)
    elif isinstance(data, np.ndarray):
        samples = _array_to_float32(data, channels)
    else:
        raise TypeError(f"audio must be PCM16 bytes or a numpy array, got {type(data).__name__}")
    if channels == 1:
        return samples
    if samples.size % channels:
        raise ValueError(
            f"interleaved frame of {samples.size} samples is not divisible by {channels} channels"
        )
    # Averaging rather than picking one channel keeps speech that was panned to one side.
    return samples.reshape(-1, channels).mean(axis=1, dtype=np.float32)


def _array_to_float32(data: np.ndarray, channels: int) -> np.ndarray:
    if data.ndim == 2:
        if data.shape[1] != channels:
            raise ValueError(f"2-D audio must be (frames, {channels}); got shape {data.shape}")
        data = data.reshape(-1)
    elif data.ndim != 1:
        raise ValueError(f"audio array must be 1-D or 2-D, got {data.ndim}-D")
    if data.dtype == np.int16:
        return data.astype(np.float32) * (1.0 / 32768.0)
    if data.dtype in (np.float32, np.float64):
        return data.astype(np.float32, copy=False)
    raise TypeError(f"audio array dtype must be int16, float32 or float64, got {data.dtype}")


class AudioConverter:
    """Streaming converter for one input format; keep one per stream."""

    def __init__(self, sample_rate: int, channels: int) -> None:
        check_format(sample_rate, channels)
        self.sample_rate = sample_rate
        self.channels = channels
        # Downmix first, then resample one channel: half the resampling work for stereo.
        # A fixed 3-6 ms lookahead, not soxr's block-wise 6-115 ms (asr/resample.py).
        self._resampler = None if sample_rate == TARGET_RATE else StreamingResampler(sample_rate)
        self._flushed = False
        self.input_frames = 0  # frames consumed so far, at the input rate

    def convert(self, data: AudioInput) -> np.ndarray:
        """One input frame -> 16 kHz mono float32 (a few ms shorter: the resampler's lookahead)."""
        if self._flushed:
            raise ValueError("this AudioConverter was flushed; create a new one for new audio")
        mono = to_mono_float32(data, self.channels)
        self.input_frames += mono.size
        if self._resampler is None:
            return mono
        return self._resampler.push(mono)

    def flush(self) -> np.ndarray:
        """End of input: the samples the resampler still held back."""
        if self._flushed:
            return np.zeros(0, np.float32)
        self._flushed = True
        if self._resampler is None:
            return np.zeros(0, np.float32)
        return self._resampler.flush()
