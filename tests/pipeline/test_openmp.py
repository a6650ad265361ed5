"""The OpenMP waiting default: passive where the user chose nothing, never over their
choice (a spin count alone counts as a choice)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from voxrelay.asr.config import ASRConfig
from voxrelay.pipeline.openmp import (
    DEFAULT_MARKER,
    DEFAULT_POLICY,
    POLICY_VARIABLE,
    SPIN_VARIABLE,
)


def _after_default(extra: dict[str, str], spin: int = 0) -> str:
    """GOMP_SPINCOUNT and OMP_WAIT_POLICY in a fresh process after the default is set
    (with a stage's own `spin`, as its stage process sets it)."""
    ours = (SPIN_VARIABLE, POLICY_VARIABLE, DEFAULT_MARKER)
    env = {k: v for k, v in os.environ.items() if k not in ours}
    env.update(extra)
    code = (
        "import os; from pipeline.openmp import prefer_passive_openmp; "
        f"prefer_passive_openmp({spin}); "
        f"print(os.environ.get('{SPIN_VARIABLE}'), os.environ.get('{POLICY_VARIABLE}'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, f"None {DEFAULT_POLICY}"),
        ({POLICY_VARIABLE: "ACTIVE"}, "None ACTIVE"),
        ({SPIN_VARIABLE: "10000"}, "10000 None"),  # the single-user opt-in
    ],
)
def test_default_and_the_users_choice(extra: dict[str, str], expected: str) -> None:
    assert _after_default(extra) == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, "100000 None"),  # a stage started alone
        # started by the CLI, whose default it inherits: replaced by the stage's own
        ({POLICY_VARIABLE: DEFAULT_POLICY, DEFAULT_MARKER: "1"}, "100000 None"),
        ({POLICY_VARIABLE: DEFAULT_POLICY}, f"None {DEFAULT_POLICY}"),  # the user's choice
        ({SPIN_VARIABLE: "0"}, "0 None"),
    ],
)
def test_a_stage_spins_as_asked_unless_the_user_chose(extra: dict[str, str], expected: str) -> None:
    assert _after_default(extra, spin=100_000) == expected
    # A stage that asks for no spin keeps the passive default under the CLI's.
    inherited = {POLICY_VARIABLE: DEFAULT_POLICY, DEFAULT_MARKER: "1"}
    assert _after_default(inherited) == f"None {DEFAULT_POLICY}"


def test_the_asr_spins_in_one_user_commands_only() -> None:
    from voxrelay.pipeline.settings import COMMAND_DEFAULTS

    spins = {command: defaults.get(("asr", "openmp_spin"), 0)
             for command, defaults in COMMAND_DEFAULTS.items()}  # fmt: skip
    assert spins["run"] == spins["mic"] > 0
    assert spins["serve"] == spins["sip"] == spins["audiosocket"] == 0
    with pytest.raises(ValueError, match="openmp_spin"):
        ASRConfig(openmp_spin=-1)


# Notes the waiting policy each OpenMP-carrying runtime first loads under.
_WATCH_IMPORTS = """
import importlib.abc, os, sys
seen = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "ctranslate2") and name not in seen:
            seen[name] = os.environ.get("OMP_WAIT_POLICY")
        return None
sys.meta_path.insert(0, Watch())
import bench.__main__
print(sorted(seen.items()))
"""


def test_the_bench_sets_the_default_before_any_runtime_loads() -> None:
    # libgomp reads the policy once, as torch or CTranslate2 loads it: set later, the
    # bench's in-process figures ran with spinning threads the stages never have.
    env = {k: v for k, v in os.environ.items() if k not in (SPIN_VARIABLE, POLICY_VARIABLE)}
    result = subprocess.run(
        [sys.executable, "-c", _WATCH_IMPORTS], env=env, capture_output=True, text=True, check=True
    )
    expected = [("ctranslate2", DEFAULT_POLICY), ("torch", DEFAULT_POLICY)]
    assert result.stdout.strip().splitlines()[-1] == repr(expected)
