import os
from pathlib import Path

import pytest

from pipeline.models import ModelError, asset_path

# Idle OpenMP pools must not spin on 2 cores (see pipeline.supervisor.stage_environment).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def clips_dir() -> Path:
    try:
        return asset_path("testclips")
    except ModelError as exc:
        pytest.skip(f"test clips missing: {exc}")
