"""The decode's pool threads are learned on the first decode and pinned to distinct CPUs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from asr.config import ASRConfig
from asr.decoder import WhisperDecoder
from asr.threads import PLACEMENT, ThreadPlacement
from tests.asr.clipdata import read_clip, silence, trim

ALL_CPUS = os.sched_getaffinity(0)
pytestmark = pytest.mark.skipif(len(ALL_CPUS) < 2, reason="needs 2 CPUs")


def _clip(clips: Path) -> np.ndarray:
    return np.concatenate([trim(read_clip(clips / "goforward.raw")), silence(0.2)])


def test_a_decode_learns_its_pools_and_pins_them_apart(clips: Path, models) -> None:
    whisper = models.whisper["tiny.en"]
    decoder = WhisperDecoder(whisper, ASRConfig(model="tiny.en"))
    assert "forward" in decoder.decode(_clip(clips)).text.lower()
    pools = PLACEMENT.pools
    # CTranslate2 at cpu_threads=2: its own thread and one OpenMP worker; PyTorch: a worker.
    assert len(pools["encoder"]) == 2 and len(pools["text decoder"]) >= 1, pools
    python_threads = {thread.native_id for thread in threading.enumerate()}
    ours = {int(tid) for tid in os.listdir("/proc/self/task")}
    for threads in pools.values():
        assert not set(threads) & python_threads and set(threads) <= ours
    PLACEMENT.spread()
    for threads in pools.values():
        placed = [os.sched_getaffinity(tid) for tid in threads]
        assert all(len(cpus) == 1 for cpus in placed), placed
        assert len(set().union(*placed)) == min(len(threads), len(ALL_CPUS)), placed
    # The next decode re-pins them from wherever the caller is; the text is unchanged.
    assert decoder.decode(_clip(clips)).text == decoder.decode(_clip(clips)).text


def test_spreading_can_be_switched_off(clips: Path, models) -> None:
    whisper = models.whisper["tiny.en"]
    WhisperDecoder(whisper, ASRConfig(model="tiny.en")).decode(_clip(clips))  # pools learned
    threads = [tid for pool in PLACEMENT.pools.values() for tid in pool]
    for tid in threads:
        os.sched_setaffinity(tid, ALL_CPUS)
    WhisperDecoder(whisper, ASRConfig(model="tiny.en", spread_threads=False)).decode(_clip(clips))
    assert all(os.sched_getaffinity(tid) == ALL_CPUS for tid in threads)


def test_without_proc_it_only_runs_the_work() -> None:
    placement = ThreadPlacement()
    placement.enabled = False
    assert placement.observe("encoder", lambda: 42) == 42
    placement.spread()
    assert placement.pools == {}
