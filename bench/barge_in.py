"""Barge-in that cuts at once (barge_in_min_words 0, the default) against barge-in that
pauses while the words decide (1), the same utterances over the same replies, one run.

Three kinds of speech over a reply, each right after the reply's first audio reaches
the sink, on a session of its own (the default learned end of turn):
- an interruption: the next bench clip, a whole sentence;
- a backchannel: "Okay." in the joe voice;
- a wordless sound: a hummed vowel, which the VAD hears and Whisper hears no words in.

Per kind and setting: how soon the sink was told to stop playing (the pause or the
clear, from the turn's speech start), whether the reply was cut, whether the overlapping
turn got a reply of its own, and how long a paused reply was held before it resumed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from bench.e2e import ClearWatch, corpus
from voxrelay.ipc.records import Stamp
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.session import Session

ROUNDS = 3
SETTINGS = (0, 1)  # barge_in_min_words
KINDS = ("interruption", "backchannel", "wordless")


class _Watch(ClearWatch):
    """A sink that stamps the sink events the comparison reads, on the shared clock."""

    def __init__(self) -> None:
        super().__init__()
        self.session: Session | None = None
        self.reply_turn = -1  # the first turn with reply audio: the one spoken over
        self.audio_turns: set[int] = set()
        self.starts: dict[int, int] = {}  # turn -> the ASR's speech start stamp
        self.events: dict[str, int] = {}  # kind -> first arrival ns, after the reply began

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        if not self.first_audio.is_set():
            self.reply_turn = turn_id
            self.first_audio.set()
        self.audio_turns.add(turn_id)

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        if kind == "speech.started" and self.session is not None:
            # The row holds the stamp already (a discarded turn's row goes later).
            self.starts[turn_id] = self.session.turns[turn_id].stamps[Stamp.SPEECH_START]
        if self.first_audio.is_set():
            self.events.setdefault(kind, time.perf_counter_ns())


def _speech() -> dict[str, list[tuple[Clip, Clip]]]:
    """(the turn whose reply is spoken over, what is said over it) per kind and round."""
    from tests.pipeline.test_barge_in import hum, spoken

    clips = [clip for _name, clip in corpus()]
    okay = spoken("Okay.")
    return {
        "interruption": [(clips[i], clips[i + 1]) for i in range(ROUNDS)],
        "backchannel": [(clips[i], okay) for i in range(ROUNDS)],
        "wordless": [(clips[i], hum()) for i in range(ROUNDS)],
    }


async def _trial(pipeline: Pipeline, first: Clip, over: Clip) -> dict[str, Any]:
    watch = _Watch()
    session = watch.session = pipeline.open_session(watch, "bench")
    try:
        await pipeline.feed(session.session_id, first.with_silence(0.6), realtime=True)
        await asyncio.wait_for(watch.first_audio.wait(), 30)
        await pipeline.feed(session.session_id, over.with_silence(2.5), realtime=True)
        # Then 2.5 s of silence: the overlapping turn is decided (dismissed, answered, its
        # reply begun) or discarded by its end.
    finally:
        pipeline.close_session(session.session_id)
    overlapping = min((t for t in watch.starts if t > watch.reply_turn), default=None)
    events = watch.events
    stops = [ns for kind, ns in events.items() if kind.startswith("response.audio.")]
    start = watch.starts.get(overlapping, 0) if overlapping is not None else 0
    return {
        "stop_ms": (min(stops) - start) / 1e6 if stops and start else None,
        "cut": "response.audio.clear" in events,
        "answered": overlapping is not None and overlapping in watch.audio_turns,
        "held_ms": (
            (events["response.audio.resume"] - events["response.audio.pause"]) / 1e6
            if "response.audio.resume" in events and "response.audio.pause" in events
            else None
        ),
    }


async def _measure() -> dict[tuple[int, str], list[dict[str, Any]]]:
    speech = _speech()
    trials: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for words in SETTINGS:
        async with Pipeline(PipelineConfig(barge_in_min_words=words)) as pipeline:
            await pipeline.run_clip(speech["interruption"][0][0])  # warm-up
            for kind in KINDS:
                trials[words, kind] = [
                    await _trial(pipeline, first, over) for first, over in speech[kind]
                ]
    return trials


def _median(values: list[float | None]) -> float:
    present = [v for v in values if v is not None]
    return round(float(np.median(present)), 1) if present else float("nan")


def run() -> dict[str, float]:
    trials = asyncio.run(_measure())
    results: dict[str, float] = {"barge_in.rounds": float(ROUNDS)}
    for (words, kind), rows in trials.items():
        key = f"{kind}.words{words}"
        results[f"barge_in.stop_ms.p50.{key}"] = _median([r["stop_ms"] for r in rows])
        results[f"barge_in.cut.{key}"] = float(sum(r["cut"] for r in rows))
        results[f"barge_in.answered.{key}"] = float(sum(r["answered"] for r in rows))
        results[f"barge_in.held_ms.p50.{key}"] = _median([r["held_ms"] for r in rows])
    return results


def table(results: dict[str, float]) -> str:
    rounds = int(results["barge_in.rounds"])
    lines = [
        f"barge-in, cut at once (min words 0) vs pause while the words decide (1), "
        f"{rounds} trials each:",
        f"{'speech over the reply':<22}{'words':>6}{'stop p50 ms':>13}{'cut':>6}"
        f"{'answered':>10}{'held p50 ms':>13}",
    ]
    for kind in KINDS:
        for words in SETTINGS:
            key = f"{kind}.words{words}"
            lines.append(
                f"{kind:<22}{words:>6}{results[f'barge_in.stop_ms.p50.{key}']:>13}"
                f"{results[f'barge_in.cut.{key}']:>6.0f}"
                f"{results[f'barge_in.answered.{key}']:>10.0f}"
                f"{results[f'barge_in.held_ms.p50.{key}']:>13}"
            )
    stop0 = results["barge_in.stop_ms.p50.interruption.words0"]
    stop1 = results["barge_in.stop_ms.p50.interruption.words1"]
    lines.append(f"interruption: reply stopped, pause vs cut at once: {stop1 / stop0:.2f}x")
    return "\n".join(lines)
