"""The ASR's input resampler: exact in the pass band, quiet in the stop band, time-aligned,
and never holding back more than its fixed lookahead (soxr held back up to 115 ms)."""

from __future__ import annotations

import numpy as np
import pytest

from voxrelay.asr.resample import OUT_RATE, StreamingResampler

RATES = (8000, 22050, 24000, 44100, 48000)


def _tones(rate: int, seconds: float, freqs: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The same tones sampled at `rate` and, as the reference, at 16 kHz."""

    def at(r: int) -> np.ndarray:
        t = np.arange(int(r * seconds)) / r
        return sum(0.3 * np.sin(2 * np.pi * f * t) for f in freqs).astype(np.float32)

    return at(rate), at(OUT_RATE)


@pytest.mark.parametrize("rate", RATES)
def test_tones_in_the_pass_band_come_out_on_time_and_within_1e_4(rate: int) -> None:
    x, reference = _tones(rate, 1.0, (440.0, 0.8 * min(rate, OUT_RATE) / 2))
    resampler = StreamingResampler(rate)
    frame = rate // 50  # 20 ms, as a caller sends it
    held_back = []
    out: list[np.ndarray] = []
    pushed = 0
    for start in range(0, x.size, frame):
        out.append(resampler.push(x[start : start + frame]))
        pushed += x[start : start + frame].size
        emitted = sum(chunk.size for chunk in out)
        held_back.append(pushed * OUT_RATE / rate - emitted)
    out.append(resampler.flush())
    y = np.concatenate(out)
    assert y.size == reference.size
    edge = 200  # the first and last few ms see the silence before and after
    assert np.abs(y - reference)[edge:-edge].max() < 1e-4
    # Never more than the lookahead (plus one output sample's rounding) held back.
    assert max(held_back) <= resampler.lookahead_s * OUT_RATE + 1
    assert resampler.lookahead_s <= 0.0065


@pytest.mark.parametrize("rate", (22050, 44100, 48000))
def test_tones_above_8_khz_are_80_db_down(rate: int) -> None:
    x, _ = _tones(rate, 0.5, (8500.0, 10_000.0))
    resampler = StreamingResampler(rate)
    y = np.concatenate([resampler.push(x), resampler.flush()])
    assert np.abs(y[500:-500]).max() < 0.3 * 10 ** (-80 / 20)


def test_frame_boundaries_change_nothing() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal(44_100).astype(np.float32) * 0.1
    whole = StreamingResampler(44_100)
    expected = np.concatenate([whole.push(x), whole.flush()])
    pieces = StreamingResampler(44_100)
    cuts = np.sort(rng.choice(x.size, 40, replace=False))
    parts = [pieces.push(part) for part in np.split(x, cuts)]
    got = np.concatenate([*parts, pieces.flush()])
    np.testing.assert_allclose(got, expected, atol=1e-6)
