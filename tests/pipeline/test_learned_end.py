"""The learned end of turn through the stage processes: the LLM's P(end of turn) reaches
the ASR in time to decide the pause, and the natural-pause clips keep one turn each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.asr.clipdata import read_clip, trim
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline

pytestmark = pytest.mark.slow


def _clip(audio: np.ndarray) -> Clip:
    return Clip((audio * 32767).astype(np.int16), 16_000, 1).with_silence(3.0)


def _run(clips: list[Clip], asr: dict[str, object] | None = None) -> list[list[dict]]:
    async def scenario() -> list[list[dict]]:
        rows = []
        async with Pipeline(PipelineConfig(asr=asr or {})) as pipeline:
            for clip in clips:
                result = await pipeline.run_clip(clip)
                assert not result.errors, result.errors
                rows.append([trace.to_dict() for trace in result.traces])
        return rows

    return asyncio.run(scenario())


@pytest.mark.parametrize("audio_model", ["none", "smart-turn"])
def test_the_llms_probability_decides_the_pause(clips_dir: Path, audio_model: str) -> None:
    asr = {"turn_audio_model": audio_model}
    (rows,) = _run([_clip(trim(read_clip(clips_dir / "goforward.raw")))], asr)
    (row,) = rows
    assert row["end_scores"] >= 1, row
    assert row["end_text_prob"] is not None, row  # it came from the LLM stage in time
    if audio_model == "smart-turn":  # Smart Turn ran in the ASR process and was traced
        assert row["end_audio_prob"] is not None and 0 <= row["end_audio_prob"] <= 1
    else:
        assert row["end_audio_prob"] is None, row
    # Whisper's own closing probability: "Go forward ten meters." is a whole command.
    assert row["end_closing_prob"] is not None and row["end_closing_prob"] > 0.5, row
    assert 0 <= row["end_prob"] <= 1 and row["end_decision_ms"] > 0
    assert row["reply_text"] and row["ttfa_ms"] is not None


def test_voxrelay_run_keeps_jfk_one_turn(natural_dir: Path, tmp_path) -> None:
    """`voxrelay run` on JFK with 3 s of silence after it, at the default eagerness: one
    turn through the processes (its comma pauses of 0.6-1.2 s hold), committed by its
    learned end (not by the end of the file), with a reply."""
    import json
    import subprocess
    import sys
    import wave

    clip = _clip(read_clip(natural_dir / "jfk.wav"))
    source = tmp_path / "jfk-and-silence.wav"
    with wave.open(str(source), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16_000)
        out.writeframes(clip.pcm16.tobytes())
    traces = tmp_path / "traces.jsonl"
    command = [sys.executable, "-m", "voxrelay.pipeline.cli", "run", "--input", str(source),
               "--output", str(tmp_path / "reply.wav"), "--trace", str(traces)]  # fmt: skip
    subprocess.run(command, check=True, timeout=300, capture_output=True)
    rows = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(rows) == 1, [row["transcript"] for row in rows]
    (row,) = rows
    assert "country" in row["transcript"].lower() and row["reply_text"], row
    assert row["end_prob"] is not None and row["endpoint_ms"] < 2_900, row  # before the EOF


def test_a_spoken_question_ends_the_turn_at_the_floor(clips_dir: Path) -> None:
    """Questions, the commonest turn a voice agent hears (synthetic speech: the natural
    set holds almost none), end the turn at the breath-length floor, not after the
    fallback: Whisper's question mark reaches the LLM's probe (docs/asr.md, session 15)."""
    from tests.asr.spoken_requests import REQUESTS, request_turns
    from voxrelay.asr.config import ASRConfig
    from voxrelay.asr.models import load_asr

    turns = request_turns(load_asr(ASRConfig(model="tiny.en")).vad)
    questions = [turn for turn, text in zip(turns, REQUESTS, strict=True) if text.endswith("?")]
    rows = _run([_clip(turn.audio) for turn in questions[:3]])
    for turn_rows in rows:
        assert len(turn_rows) == 1, [row["transcript"] for row in turn_rows]
        (row,) = turn_rows
        assert row["transcript"].rstrip().endswith("?"), row
        assert row["end_wait_ms"] == 300 and row["endpoint_ms"] < 700, row
        assert row["reply_text"], row
