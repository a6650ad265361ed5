from pathlib import Path

import numpy as np

from tests.asr.clipdata import read_clip
from voxrelay.asr.vad import WINDOW_SAMPLES, StreamingVAD, load_vad_model


def test_streaming_matches_faster_whisper_batch_vad(clips: Path) -> None:
    audio = read_clip(clips / "goforward.raw")
    audio = audio[: audio.size // WINDOW_SAMPLES * WINDOW_SAMPLES]
    model = load_vad_model()
    batch = np.asarray(model(audio.copy())).reshape(-1)
    vad = StreamingVAD(model)
    # Odd chunk sizes: windows must straddle push() calls transparently.
    streamed = [p for i in range(0, audio.size, 333) for p in vad.push(audio[i : i + 333])]
    assert len(streamed) == batch.size
    np.testing.assert_allclose(streamed, batch, atol=0.01)
    assert max(streamed) > 0.9  # the clip has speech
    assert vad.pad_and_finish() == []


def test_silence_and_noise_score_low() -> None:
    vad = StreamingVAD(load_vad_model())
    assert max(vad.push(np.zeros(16_000, np.float32))) < 0.1
    noise = np.random.default_rng(0).normal(0, 0.05, 16_000).astype(np.float32)
    assert max(vad.push(noise)) < 0.5


def test_partial_window_is_scored_on_finish() -> None:
    vad = StreamingVAD(load_vad_model())
    assert vad.push(np.zeros(700, np.float32)) != []
    assert len(vad.pad_and_finish()) == 1
    assert vad.windows_done == 2
