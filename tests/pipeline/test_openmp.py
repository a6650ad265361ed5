"""The OpenMP spin defaults: set where the user chose nothing, never over their choice."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline.openmp import (
    OURS_VARIABLE,
    POLICY_VARIABLE,
    SPIN_COUNT,
    SPIN_VARIABLE,
    STAGE_SPIN_COUNTS,
)

LLM_SPIN = STAGE_SPIN_COUNTS["llm"]


def _spin_after(calls: list[str | None], extra: dict[str, str]) -> str:
    """GOMP_SPINCOUNT and OMP_WAIT_POLICY in a fresh process after the given calls (a
    parent's `prefer_short_openmp_spin()` then a stage's `(stage)`), as a stage sees them."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (SPIN_VARIABLE, POLICY_VARIABLE, OURS_VARIABLE)
    }
    env.update(extra)
    code = "import os; from pipeline.openmp import prefer_short_openmp_spin as spin; "
    code += "".join(f"spin({stage!r}); " for stage in calls)
    code += f"print(os.environ.get('{SPIN_VARIABLE}'), os.environ.get('{POLICY_VARIABLE}'))"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ([None], f"{SPIN_COUNT} None"),  # the CLI process
        ([None, "asr"], f"{SPIN_COUNT} None"),  # a stage under the CLI
        ([None, "llm"], f"{LLM_SPIN} None"),  # the LLM stage spins longer
        (["llm"], f"{LLM_SPIN} None"),  # a stage started without the CLI
    ],
)
def test_defaults(calls: list[str | None], expected: str) -> None:
    assert _spin_after(calls, {}) == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({POLICY_VARIABLE: "PASSIVE"}, "None PASSIVE"),
        ({SPIN_VARIABLE: "300000"}, "300000 None"),
    ],
)
def test_the_users_choice_wins_in_every_process(extra: dict[str, str], expected: str) -> None:
    assert _spin_after([None, "llm"], extra) == expected
