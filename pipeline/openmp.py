"""OpenMP waiting policy for every voxrelay process.

CTranslate2 (ASR) and PyTorch (LLM) each bring a libgomp thread pool. After every
parallel region libgomp lets the idle threads spin, by default ~300,000 rounds
(milliseconds): on 2 cores one stage's spinning pool starves the next stage (we measured
a 5x slower LLM beside an idle Whisper). Fully passive waiting, our fix until session 5,
has the opposite cost: an LLM decode step is ~25 small ops per layer, each a parallel
region, and each one had to wake a sleeping thread: 58 ms per step instead of 46, and
TTFA p50 +90 ms end to end (docs/pipeline.md, "OpenMP spin"). A short spin keeps a pool
awake between the ops of one pass and gives the core back ~0.1 ms after the pass ends.

libgomp reads the count once, when it loads: the CLI, the bench and the tests set it
before any model runtime is imported, and each stage process sets its own before it
loads its model. The LLM stage spins longer (~1 ms): its decode steps follow each other
with ~1 ms of Python between them, and a pool asleep at the start of every step cost
more than the spin does (TTFA p50 726 vs 805 ms, same run). A waiting policy or spin
count set by the user wins everywhere.
"""

from __future__ import annotations

import os

POLICY_VARIABLE = "OMP_WAIT_POLICY"
SPIN_VARIABLE = "GOMP_SPINCOUNT"
# Set next to SPIN_VARIABLE when the count is ours, so a stage may replace it.
OURS_VARIABLE = "VOXRELAY_OPENMP_SPIN_DEFAULT"
# libgomp estimates ~100,000 spin rounds per millisecond.
SPIN_COUNT = 10_000
STAGE_SPIN_COUNTS = {"llm": 100_000}


def prefer_short_openmp_spin(stage: str | None = None) -> None:
    """Set the spin default in this process (and so in the children it spawns);
    `stage`: in a stage process, that stage's count."""
    ours = os.environ.get(OURS_VARIABLE) == "1"
    if not ours and (POLICY_VARIABLE in os.environ or SPIN_VARIABLE in os.environ):
        return
    os.environ[SPIN_VARIABLE] = str(STAGE_SPIN_COUNTS.get(stage or "", SPIN_COUNT))
    os.environ[OURS_VARIABLE] = "1"
