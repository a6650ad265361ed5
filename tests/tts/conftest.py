"""Shared fixtures: the real Piper voice, loaded once per test session."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from voxrelay.pipeline.models import asset_path
from voxrelay.tts.config import TTSConfig
from voxrelay.tts.voice import Voice


@pytest.fixture(scope="session")
def voice_dir() -> Path:
    return asset_path("joe")


@pytest.fixture(scope="session")
def config(voice_dir: Path) -> TTSConfig:
    # The chunker cases below are written for a 2 / 8 first-fragment rule; pinned here so
    # they test the rule, not whatever the latency-tuned default is today.
    return TTSConfig(voice_dir=voice_dir, first_fragment_min_words=2, first_fragment_max_words=8)


@pytest.fixture(scope="session")
def voice(config: TTSConfig) -> Voice:
    return Voice(config)


@pytest.fixture(scope="session")
def whole_voice(config: TTSConfig) -> Voice:
    """The vocoder run on whole sentences: every chunk joint is a sentence or fragment
    edge, which is what the click checks look at (the chunked vocoder's own joints are
    checked sample by sample against this in test_vocoder.py)."""
    return Voice(dataclasses.replace(config, first_chunk_frames=0))
