"""The whole pipeline: real clip -> ASR, LLM, TTS processes -> reply audio and trace."""

import asyncio
import os
import signal

import jiwer
import pytest

from voxrelay.ipc.records import Stamp
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline

pytestmark = pytest.mark.slow

EXPECTED = "he was not an ill disposed young man"


def _normalise(text: str) -> str:
    return " ".join(jiwer.RemovePunctuation()(text.lower().replace("-", " ")).split())


def _check_turn(result, expected: str) -> dict:
    assert not result.errors, result.errors
    assert len(result.traces) == 1
    row = result.traces[0].to_dict()
    assert jiwer.wer(expected, _normalise(row["transcript"])) <= 0.25, row["transcript"]
    assert row["reply_text"].strip(), "the LLM produced no reply"
    seconds = len(result.audio) / 2 / result.sample_rate
    assert result.sample_rate == 22050
    assert 0.5 < seconds < 60, f"reply audio of {seconds:.2f} s"
    assert abs(seconds * 1000 - row["audio_out_ms"]) < 5
    for key in (
        "speech_end_ns",
        "asr_final_ns",
        "llm_first_token_ns",
        "tts_first_audio_ns",
        "first_audio_out_ns",
    ):
        assert row[key], key
    assert row["speech_end_ns"] < row["asr_final_ns"]
    # The reply may start at the speculative end, before the final transcript ...
    assert row["speech_end_ns"] < row["llm_start_ns"] < row["llm_first_token_ns"]
    if row["speculative_end_ns"]:
        assert row["speculative_end_ns"] <= row["asr_final_ns"]
    assert row["llm_first_token_ns"] <= row["tts_first_audio_ns"] <= row["first_audio_out_ns"]
    # ... but nothing of it leaves the pipeline before the turn is committed.
    assert row["asr_final_ns"] < row["first_audio_out_ns"]
    assert 0 < row["ttfa_ms"] < 10_000
    return row


@pytest.mark.parametrize("transport", ["shm", "zmq"])
def test_real_clip_through_three_processes(clips_dir, tmp_path, transport):
    clip = read_clip(clips_dir / "librivox/0880.wav")
    trace_path = tmp_path / "traces.jsonl"

    async def scenario():
        async with Pipeline(PipelineConfig(transport=transport), trace_path) as pipeline:
            pids = [pipeline.supervisor.stage_pid(s) for s in ("asr", "llm", "tts")]
            result = await pipeline.run_clip(clip)
        return result, pids

    result, pids = asyncio.run(scenario())
    _check_turn(result, EXPECTED)
    assert len(trace_path.read_text().splitlines()) == 1
    for pid in pids:  # stop() leaves no stray process behind
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_tts_killed_mid_turn_fails_that_turn_and_the_next_works(clips_dir):
    clip = read_clip(clips_dir / "librivox/0880.wav")

    async def scenario():
        async with Pipeline(PipelineConfig()) as pipeline:
            supervisor = pipeline.supervisor
            victim = supervisor.stage_pid("tts")
            first = asyncio.create_task(pipeline.run_clip(clip))
            # Kill TTS once the LLM has started replying: a turn is in flight.
            while not any(
                Stamp.LLM_FIRST_TOKEN in t.stamps
                for s in pipeline.router.sessions.values()
                for t in s.turns.values()
            ):
                assert not first.done(), "turn ended before the LLM replied"
                await asyncio.sleep(0.005)
            os.kill(victim, signal.SIGKILL)
            failed = await asyncio.wait_for(first, 30)
            while not supervisor.is_ready("tts"):
                await asyncio.sleep(0.05)
            assert supervisor.stage_pid("tts") != victim
            assert supervisor.restarts("tts") == 1
            second = await pipeline.run_clip(clip)
        return failed, second

    failed, second = asyncio.run(scenario())
    assert failed.errors and "tts stage process exited" in failed.errors[0]
    assert failed.traces and failed.traces[0].error
    _check_turn(second, EXPECTED)


def test_stopped_stage_is_noticed_by_heartbeat_and_replaced(clips_dir):
    """SIGSTOP: alive (the pidfd stays quiet) but stuck; the heartbeat catches it."""
    clip = read_clip(clips_dir / "librivox/0880.wav")

    async def scenario():
        config = PipelineConfig(heartbeat_timeout_s=1.0)
        async with Pipeline(config) as pipeline:
            supervisor = pipeline.supervisor
            victim = supervisor.stage_pid("llm")
            os.kill(victim, signal.SIGSTOP)
            loop = asyncio.get_running_loop()
            stopped_at = loop.time()
            while supervisor.restarts("llm") == 0:
                assert loop.time() - stopped_at < 5, "the stuck stage was not noticed"
                await asyncio.sleep(0.05)
            noticed_s = loop.time() - stopped_at
            while not supervisor.is_ready("llm"):
                await asyncio.sleep(0.05)
            result = await pipeline.run_clip(clip)
        return victim, noticed_s, result

    victim, noticed_s, result = asyncio.run(scenario())
    assert 0.9 < noticed_s < 1.8
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
    _check_turn(result, EXPECTED)
