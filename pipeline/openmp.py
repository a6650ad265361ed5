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

A stage may ask for its own short spin (`ASRConfig.openmp_spin`, on for the one-user
commands `voxrelay run` and `mic`): its process then replaces the CLI's passive default
with that spin count, which the marker variable tells from a user's choice.
"""

from __future__ import annotations

import os

POLICY_VARIABLE = "OMP_WAIT_POLICY"
SPIN_VARIABLE = "GOMP_SPINCOUNT"
DEFAULT_POLICY = "PASSIVE"
# Set beside the default: the policy in the environment is ours, not the user's, so a
# stage process may put its own in its place.
DEFAULT_MARKER = "VOXRELAY_OPENMP_DEFAULT"


def prefer_passive_openmp(spin: int = 0) -> None:
    """Set the default in this process (and so in the children it spawns), unless the
    user chose a waiting policy or a spin count: passive, or with `spin` > 0 that many
    spin rounds after each parallel region (a stage's own setting, e.g.
    `ASRConfig.openmp_spin`). A stage process started under the CLI's default replaces
    it with its own."""
    user_chose = POLICY_VARIABLE in os.environ or SPIN_VARIABLE in os.environ
    if user_chose and DEFAULT_MARKER not in os.environ:
        return
    os.environ[DEFAULT_MARKER] = "1"
    if spin:
        os.environ.pop(POLICY_VARIABLE, None)
        os.environ[SPIN_VARIABLE] = str(spin)
    else:
        os.environ[POLICY_VARIABLE] = DEFAULT_POLICY
        os.environ.pop(SPIN_VARIABLE, None)
