"""Soak: many consecutive turns in one session and across sessions, with the real models.

After a warm-up (first-turn allocations, caches filling), resident memory of the
supervisor and the three stage processes grows less than 5 %, and their open fds and
threads stay exactly constant. CI runs a short form; `make soak` (VOXRELAY_SOAK=1) runs
500 turns each.
"""

import asyncio
import os
import time

import psutil
import pytest

from tests.pipeline.pipeline_thread import fd_census, stage_children, wait_standbys
from tests.soak import SOAK
from voxrelay.pipeline.audio_io import read_clip

pytestmark = [pytest.mark.slow, pytest.mark.soak]

TURNS = int(os.environ.get("VOXRELAY_SOAK_TURNS") or (500 if SOAK else 6))
WARMUP = max(2, min(25, TURNS // 20))
MAX_RSS_GROWTH = 0.05


@pytest.fixture(scope="module")
def soaked(shared_pipeline, clips_dir):
    # A standby still loading would count as growth; they load fastest while idle.
    wait_standbys(shared_pipeline.pipeline.supervisor)
    return shared_pipeline, read_clip(clips_dir / "cards/005.wav").with_silence(1.0)


class _TurnSink:
    def __init__(self) -> None:
        self.done: asyncio.Queue = asyncio.Queue()
        self.errors: list[str] = []

    def on_audio(self, turn_id, pcm16, sample_rate):
        pass

    def on_text(self, turn_id, kind, text):
        pass

    def on_error(self, turn_id, message):
        self.errors.append(message)

    def on_audio_end(self, turn_id: int) -> None:
        pass

    def on_turn_done(self, trace):
        self.done.put_nowait(trace)

    def on_input_end(self, lost: bool) -> None:
        pass


def _census(supervisor) -> dict:
    """Memory, fds and threads of this process and of each stage process and standby."""
    processes = {"supervisor": psutil.Process(), **stage_children(supervisor)}
    return {
        "rss": {name: p.memory_info().rss for name, p in processes.items()},
        "fds": {name: fd_census(p.pid)[0] for name, p in processes.items()},
        "threads": {name: p.num_threads() for name, p in processes.items()},
    }


def _check(baseline: dict, end: dict, label: str) -> None:
    # The bound is on the processes that work: the standbys' idle model copies would
    # dilute it. Standbys do nothing, so they must not grow at all to speak of.
    working = [name for name in baseline["rss"] if not name.endswith("-standby")]
    before = sum(baseline["rss"][name] for name in working)
    after = sum(end["rss"].get(name, 0) for name in working)
    growth = after / before - 1
    print(f"{label}: RSS {before / 2**20:.0f} MiB -> {after / 2**20:.0f} MiB ({growth:+.2%})")
    for name, rss in baseline["rss"].items():
        now = end["rss"].get(name, 0)
        print(
            f"  {name}: RSS {rss / 2**20:.1f} -> {now / 2**20:.1f} MiB ({now / rss - 1:+.2%}), "
            f"fds {baseline['fds'][name]} -> {end['fds'].get(name)}, "
            f"threads {baseline['threads'][name]} -> {end['threads'].get(name)}"
        )
    assert growth < MAX_RSS_GROWTH, f"RSS grew {growth:.1%}"
    for name in set(baseline["rss"]) - set(working):
        assert end["rss"][name] / baseline["rss"][name] - 1 < MAX_RSS_GROWTH, f"{name} grew"
    assert end["fds"] == baseline["fds"], "open fds changed"
    assert end["threads"] == baseline["threads"], "thread count changed"


def test_consecutive_turns_in_one_session(soaked):
    thread, clip = soaked
    pipeline = thread.pipeline

    async def turns() -> tuple[dict, dict, list, int]:
        sink = _TurnSink()
        session = pipeline.open_session(sink, "soak")
        baseline: dict = {}
        answered = []
        for index in range(TURNS):
            await pipeline.feed(session.session_id, clip, realtime=False)
            trace = await asyncio.wait_for(sink.done.get(), 120)
            answered.append(trace)
            # A user who lets the reply finish: speaking over it would be a barge-in.
            await asyncio.sleep(max(0.0, (session.playbacks.end_ns - time.perf_counter_ns()) / 1e9))
            assert not sink.errors, sink.errors
            if index + 1 == WARMUP:
                baseline = _census(pipeline.supervisor)
        open_turns = len(session.turns)
        pipeline.close_session(session.session_id)
        return baseline, _census(pipeline.supervisor), answered, open_turns

    baseline, end, answered, open_turns = thread.call(turns(), timeout=TURNS * 120)
    assert [t.turn_id for t in answered] == list(range(TURNS))  # one turn per utterance
    silent = [t.to_dict() for t in answered if t.error or not t.first_audio_out_ns]
    assert not silent, silent
    assert open_turns <= 1, "finished turns left traces behind"
    _check(baseline, end, f"{TURNS} turns in one session")


def test_turns_across_sessions(soaked):
    thread, clip = soaked
    pipeline = thread.pipeline

    async def sessions() -> tuple[dict, dict]:
        baseline: dict = {}
        for index in range(TURNS):
            result = await pipeline.run_clip(clip, realtime=False, trailing_silence_s=0.0)
            assert not result.errors and len(result.traces) == 1, result.errors
            if index + 1 == WARMUP:
                baseline = _census(pipeline.supervisor)
        return baseline, _census(pipeline.supervisor)

    baseline, end = thread.call(sessions(), timeout=TURNS * 120)
    assert pipeline.router.sessions == {}
    _check(baseline, end, f"{TURNS} sessions of one turn")
