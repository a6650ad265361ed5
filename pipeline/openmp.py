"""OpenMP waiting policy for every voxrelay process.

CTranslate2, PyTorch and onnxruntime each bring an OpenMP pool whose idle threads spin
by default; on 2 cores one stage's spinning pool starves the next stage (we measured a
5x slower LLM beside an idle Whisper). Passive waiting gives the cores back. It must
be set before any OpenMP runtime loads; an explicit setting by the user wins.
"""

from __future__ import annotations

import os

POLICY_VARIABLE = "OMP_WAIT_POLICY"
DEFAULT_POLICY = "PASSIVE"


def prefer_passive_openmp() -> None:
    """Set the passive default in this process (and so in the children it spawns)."""
    os.environ.setdefault(POLICY_VARIABLE, DEFAULT_POLICY)
