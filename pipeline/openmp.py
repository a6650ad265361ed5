"""OpenMP waiting policy for every voxrelay process.

CTranslate2 (ASR) and PyTorch (LLM) each bring a libgomp thread pool. After every
parallel region libgomp lets the idle threads spin, by default ~300,000 rounds
(milliseconds): on 2 cores one stage's spinning pool starves the next stage (we measured
a 5x slower LLM beside an idle Whisper). So every process waits passively by default.

Passive waiting has a price on one conversation: an LLM decode step is ~25 small ops
per layer, each a parallel region that wakes a sleeping thread (step 56-77 ms passive,
45-51 ms with a short spin), and a short spin (`GOMP_SPINCOUNT=10000`, ~0.1 ms) cut the
TTFA p50 of single sessions by ~90 ms. With 4 concurrent sessions the same spin made
the TTFA p50 25-90% worse (the pools then hold cores other stages need). Servers carry
concurrent calls, so passive stays the default; a single-user setup may export
`GOMP_SPINCOUNT=10000` (docs/pipeline.md, "OpenMP spin"). A waiting policy or spin
count set by the user wins everywhere. libgomp reads both once, when it loads: the CLI,
the bench and the tests set the default before any model runtime is imported, and each
stage process before it loads its model (for stages started without the CLI).
"""

from __future__ import annotations

import os

POLICY_VARIABLE = "OMP_WAIT_POLICY"
SPIN_VARIABLE = "GOMP_SPINCOUNT"
DEFAULT_POLICY = "PASSIVE"


def prefer_passive_openmp() -> None:
    """Set the passive default in this process (and so in the children it spawns),
    unless the user chose a waiting policy or a spin count."""
    if POLICY_VARIABLE in os.environ or SPIN_VARIABLE in os.environ:
        return
    os.environ[POLICY_VARIABLE] = DEFAULT_POLICY
