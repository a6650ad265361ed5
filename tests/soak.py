"""Sizes of the fuzz and soak tests: short in CI, long under `make soak` (VOXRELAY_SOAK=1)."""

import gc
import os
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress

import psutil

SOAK = os.environ.get("VOXRELAY_SOAK", "") not in ("", "0")


def examples(short: int, long: int = 10_000) -> int:
    """Hypothesis examples per fuzz target; VOXRELAY_FUZZ_EXAMPLES=N sets it outright."""
    if os.environ.get("VOXRELAY_FUZZ_EXAMPLES"):
        return int(os.environ["VOXRELAY_FUZZ_EXAMPLES"])
    return long if SOAK else short


def _fd_targets() -> dict[str, str]:
    targets = {}
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):  # closed while listing (the listing's own fd, for one)
            targets[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return targets


@contextmanager
def bounded_resources(
    max_rss_growth_bytes: int | None = 64 << 20,
    settle: Callable[[], None] | None = None,
    settle_s: float = 3.0,
):
    """The block leaves no fd of its own open in this process and grows its RSS by less
    than the bound (garbage-collected Python still holds some pages: not zero). None: fds
    only; under Hypothesis, whose record of every example tried grows with the count
    (about 25 KiB per example of a dozen fields), RSS says little about the code.

    Closing is asynchronous (an event loop closes a transport on a later pass), so a leak
    is an fd still open after `settle_s` of calling `settle` (e.g. run the test's loop
    a little; default: sleep) and collecting garbage. An fd that was open before and got
    closed meanwhile (an earlier test's socket, collected) is not a leak: a CI run failed
    on a count that had gone down."""
    process = psutil.Process()
    before = _fd_targets()
    rss = process.memory_info().rss

    def opened() -> dict[str, str]:
        return {fd: target for fd, target in _fd_targets().items() if before.get(fd) != target}

    yield
    deadline = time.monotonic() + settle_s
    while opened() and time.monotonic() < deadline:
        gc.collect()
        if settle is not None:
            settle()
        else:
            time.sleep(0.05)
    leaked = opened()
    assert not leaked, f"file descriptors leaked: {leaked}"
    growth = process.memory_info().rss - rss
    if max_rss_growth_bytes is not None:
        assert growth < max_rss_growth_bytes, f"RSS grew by {growth / 2**20:.1f} MiB"
