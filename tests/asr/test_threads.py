"""The decode's pool threads are learned on the first decode and pinned to distinct CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.asr.clipdata import read_clip, silence, trim
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.decoder import WhisperDecoder
from voxrelay.asr.threads import PLACEMENT, ThreadPlacement

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
    assert len(pools["encoder tiny.en"]) == 2 and len(pools["text decoder"]) >= 1, pools
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


# A fresh process, as the ASR stage is: pytest's own has decoded with both models already.
_WARMED = """
import json, os
import numpy as np
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.decoder import WhisperDecoder
from voxrelay.asr.models import load_asr, warm_up
from voxrelay.asr.threads import PLACEMENT
tasks = lambda: len(os.listdir("/proc/self/task"))
config = ASRConfig(model="auto")
models = load_asr(config)
loaded = tasks()
warm_up(models, config)
warmed = tasks()
audio = np.load(os.environ["CLIP"])
texts = {}
for name in ("tiny.en", "base", "tiny.en"):
    decoder = WhisperDecoder(models.whisper[name], ASRConfig(model=name))
    texts[name] = decoder.decode(audio).text
print(json.dumps({"loaded": loaded, "warmed": warmed, "after": tasks(),
                  "pools": PLACEMENT.pools, "texts": texts}))
"""


def test_warm_up_starts_every_models_threads_before_a_turn(clips: Path, tmp_path: Path) -> None:
    """ "auto" loads base and tiny.en; each CTranslate2 model starts its own thread on its
    first decode. After warm_up (the ASR stage runs it before it is ready) decoding with
    either model starts no thread, and each model's encoder threads are a pool of their own
    to pin apart."""
    clip = tmp_path / "clip.npy"
    np.save(clip, _clip(clips))
    env = {**os.environ, "CLIP": str(clip), "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run(
        [sys.executable, "-c", _WARMED], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["warmed"] > report["loaded"]  # the runtimes' threads came up in warm_up
    assert report["after"] == report["warmed"], report
    assert len(report["pools"]["encoder base"]) == 2, report["pools"]
    assert len(report["pools"]["encoder tiny.en"]) == 2, report["pools"]
    assert all("forward" in text.lower() for text in report["texts"].values()), report


def test_a_thread_in_two_pools_leaves_each_pool_spread() -> None:
    """An OpenMP worker both models' encoders use is in both pools; whatever order the
    pools list it in, each pool's threads end up on different CPUs."""
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        first, shared, last = (worker.native_id for worker in workers)
        placement = ThreadPlacement()
        placement._pools = {"encoder base": [first, shared], "encoder tiny.en": [shared, last]}
        placement.spread()
        for pool in placement.pools.values():
            cpus = [os.sched_getaffinity(tid) for tid in pool]
            assert all(len(one) == 1 for one in cpus) and cpus[0] != cpus[1], cpus
    finally:
        stop.set()
        for worker in workers:
            worker.join()
