"""Sizes of the fuzz and soak tests: short in CI, long under `make soak` (VOXRELAY_SOAK=1)."""

import os
from contextlib import contextmanager

import psutil

SOAK = os.environ.get("VOXRELAY_SOAK", "") not in ("", "0")


def examples(short: int, long: int = 10_000) -> int:
    """Hypothesis examples per fuzz target; VOXRELAY_FUZZ_EXAMPLES=N sets it outright."""
    if os.environ.get("VOXRELAY_FUZZ_EXAMPLES"):
        return int(os.environ["VOXRELAY_FUZZ_EXAMPLES"])
    return long if SOAK else short


def open_fds(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextmanager
def bounded_resources(max_rss_growth_bytes: int | None = 64 << 20):
    """The block leaves this process's fd count as it found it and grows its RSS by less
    than the bound (garbage-collected Python still holds some pages: not zero). None: fds
    only; under Hypothesis, whose record of every example tried grows with the count
    (about 25 KiB per example of a dozen fields), RSS says little about the code."""
    process = psutil.Process()
    fds, rss = open_fds(), process.memory_info().rss
    yield
    assert open_fds() == fds, "file descriptors leaked"
    growth = process.memory_info().rss - rss
    if max_rss_growth_bytes is not None:
        assert growth < max_rss_growth_bytes, f"RSS grew by {growth / 2**20:.1f} MiB"
