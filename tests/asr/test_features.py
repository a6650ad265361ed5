"""The torch log-mel gives faster-whisper's features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asr.features import LogMel
from tests.asr.clipdata import read_clip


@pytest.mark.parametrize("frames", [800, 1237, 3000])
def test_log_mel_matches_faster_whisper(models, clips: Path, frames: int) -> None:
    whisper, _vad = models
    audio = read_clip(clips / "librivox" / "0870.wav")[: frames * 160]
    padded = np.zeros(frames * 160, np.float32)  # speech, then the silence padding
    padded[: audio.size] = audio
    expected = whisper.feature_extractor(padded, padding=0)[:, :frames]
    features = LogMel(whisper.feature_extractor)(padded, frames)
    assert features.shape == expected.shape == (80, frames)
    assert features.dtype == np.float32
    np.testing.assert_allclose(features, expected, atol=2e-5)
