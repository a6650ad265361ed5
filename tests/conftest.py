from pathlib import Path

import pytest

from voxrelay.pipeline.models import ModelError, asset_path
from voxrelay.pipeline.openmp import prefer_passive_openmp

prefer_passive_openmp()


@pytest.fixture(scope="session")
def clips_dir() -> Path:
    try:
        return asset_path("testclips")
    except ModelError as exc:
        pytest.skip(f"test clips missing: {exc}")


@pytest.fixture(scope="session")
def natural_dir() -> Path:
    """Real speech with natural pauses (tests/asr/natural.py)."""
    try:
        return asset_path("naturalclips")
    except ModelError as exc:
        pytest.skip(f"natural-pause clips missing: {exc}")
