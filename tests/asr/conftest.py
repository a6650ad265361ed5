"""Shared fixtures for the ASR tests: real models, loaded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from faster_whisper import WhisperModel
from faster_whisper.vad import SileroVADModel

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.models import load_asr


@pytest.fixture(scope="session")
def clips(clips_dir: Path) -> Path:
    return clips_dir


@pytest.fixture(scope="session")
def models(clips_dir: Path) -> tuple[WhisperModel, SileroVADModel]:
    from voxrelay.pipeline.models import ModelError

    try:
        return load_asr(ASRConfig())
    except ModelError as error:
        pytest.skip(f"tiny.en model missing: {error}")
