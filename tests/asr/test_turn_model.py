"""Smart Turn v3.2 (asr/turn_model.py) on real speech: its features, its cost, and what it
hears at JFK's pauses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.asr.clipdata import SAMPLE_RATE, read_clip, silence
from tests.asr.natural import natural_turns
from voxrelay.asr.turn_model import FRAMES, N_MELS, WINDOW_SAMPLES, SmartTurn
from voxrelay.asr.vad import load_vad_model
from voxrelay.pipeline.models import ModelError, asset_path


@pytest.fixture(scope="module")
def smart_turn() -> SmartTurn:
    try:
        return SmartTurn(asset_path("smart-turn") / "model.onnx")
    except ModelError as exc:
        pytest.skip(f"Smart Turn missing: {exc}")


def test_features_are_the_last_8_s_left_padded(smart_turn: SmartTurn) -> None:
    rng = np.random.default_rng(0)
    short = rng.normal(0, 0.1, SAMPLE_RATE).astype(np.float32)
    long = np.concatenate([rng.normal(0, 0.1, 3 * WINDOW_SAMPLES).astype(np.float32), short])
    features = smart_turn.features(short)
    assert features.shape == (1, N_MELS, FRAMES) and features.dtype == np.float32
    # Padding sits before the audio: the first frames are constant in time, the last vary.
    assert features[0, :, :100].std(axis=1).max() < 1e-3 < features[0, :, -50:].std(axis=1).min()
    assert smart_turn.features(long).shape == (1, N_MELS, FRAMES)  # only the tail counts


def test_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="voxrelay models fetch smart-turn"):
        SmartTurn(tmp_path / "nope.onnx")


def test_jfk_sounds_unfinished_mid_sentence_and_finished_at_the_end(
    smart_turn: SmartTurn, natural_dir: Path, clips_dir: Path
) -> None:
    (jfk, *_) = natural_turns(natural_dir, clips_dir, load_vad_model())
    assert jfk.name == "jfk" and len(jfk.pauses) == 4
    pause = int(0.2 * SAMPLE_RATE)
    # "... ask not [pause] what your country can do for you, [pause] ask what ..."
    for first, _ in jfk.pauses[2:]:
        assert smart_turn.score(jfk.audio[: first + pause]).probability < 0.2
    end = np.concatenate([jfk.audio[: jfk.speech_end], silence(0.2)])
    score = smart_turn.score(end)
    assert score.probability > 0.8
    assert 0 < score.compute_ms < 500


def test_the_score_reads_the_audio_not_its_length(smart_turn: SmartTurn, clips_dir: Path) -> None:
    clip = read_clip(clips_dir / "goforward.raw")
    assert smart_turn.score(silence(2.0)).probability != smart_turn.score(clip).probability
