"""Whisper's encoder in PyTorch bfloat16 (asr/encoder.py) against CTranslate2's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import ctranslate2
import jiwer
import numpy as np
import pytest

from tests.asr.clipdata import read_clip
from tests.asr.test_transcribe import normalize, references
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.decoder import HOP_SAMPLES, log_mel
from voxrelay.asr.encoder import load_audio_encoder
from voxrelay.asr.models import load_asr
from voxrelay.asr.transcribe import transcribe_file
from voxrelay.pipeline.models import asset_path

FRAMES = 800  # the 8 s context every decode gets at least (ASRConfig.encoder_context_s)


def _mel(clip: Path, model: str) -> np.ndarray:
    whisper = load_asr(ASRConfig(model=model)).whisper[model]
    return log_mel(whisper, read_clip(clip)[: FRAMES * HOP_SAMPLES], FRAMES)


@pytest.mark.parametrize("model", ["tiny.en", "base"])
def test_states_match_ctranslate2s_float32_encoder(clips: Path, model: str) -> None:
    mel = _mel(clips / "cards/005.wav", model)
    reference = ctranslate2.models.Whisper(
        str(asset_path(model)), device="cpu", compute_type="float32", intra_threads=2
    )
    expected = np.array(reference.encode(ctranslate2.StorageView.from_array(mel), to_cpu=True))[0]
    states = load_audio_encoder(str(asset_path(model)))(mel).float().numpy()
    assert states.shape == expected.shape == (FRAMES // 2, expected.shape[1])
    error = np.linalg.norm(states - expected) / np.linalg.norm(expected)
    # bfloat16 keeps 8 bits of mantissa: ~2% here. CTranslate2's int8 (the other CPU
    # choice) is ~5% off the same float32 states.
    assert error < 0.03, error


@pytest.mark.slow
def test_base_transcribes_the_reference_clips_as_well_either_way(clips: Path) -> None:
    items = references(clips)
    config = ASRConfig(model="base", turn_detection="silence")
    models = load_asr(config)
    truth = [normalize(text) for _, _, text in items]
    wer = {
        encoder: jiwer.wer(
            truth,
            [
                normalize(
                    transcribe_file(
                        path, replace(config, encoder=encoder), raw_s16le_16k=raw, models=models
                    )
                )
                for path, raw, _ in items
            ],
        )
        for encoder in ("ctranslate2", "bfloat16")
    }
    assert wer["bfloat16"] <= wer["ctranslate2"] <= 0.1, wer


def test_encoder_choice_is_validated() -> None:
    with pytest.raises(ValueError, match="encoder must be one of"):
        ASRConfig(encoder="float16")
    with pytest.raises(ValueError, match="needs text_decoder='native'"):
        ASRConfig(encoder="bfloat16", text_decoder="ctranslate2")
    assert ASRConfig().encoder == "ctranslate2"


def test_a_stream_decodes_with_the_bfloat16_encoder(clips: Path) -> None:
    config = ASRConfig(model="tiny.en", encoder="bfloat16", turn_detection="silence")
    text = transcribe_file(clips / "goforward.raw", config, raw_s16le_16k=True)
    assert normalize(text) == "go forward ten meters"
