"""Shared fixtures: the real Piper voice, loaded once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.models import asset_path
from tts.config import TTSConfig
from tts.voice import Voice


@pytest.fixture(scope="session")
def voice_dir() -> Path:
    return asset_path("joe")


@pytest.fixture(scope="session")
def config(voice_dir: Path) -> TTSConfig:
    return TTSConfig(voice_dir=voice_dir)


@pytest.fixture(scope="session")
def voice(config: TTSConfig) -> Voice:
    return Voice(config)
