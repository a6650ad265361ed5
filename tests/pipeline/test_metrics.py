"""GET /metrics on a real `voxrelay serve` process, after a real client's real turn."""

import asyncio
import os
import signal
import time
import urllib.error
import urllib.request

import pytest

from tests.pipeline.serve_process import one_turn
from voxrelay.pipeline.audio_io import read_clip

pytestmark = pytest.mark.slow

TTFA = "voxrelay_ttfa_seconds"


def test_a_real_turn_lands_in_the_ttfa_histogram_and_the_stage_histograms(serve_process, clips_dir):
    before = serve_process.metrics()
    clip = read_clip(clips_dir / "librivox/0880.wav")
    trace, reply_bytes = asyncio.run(one_turn(serve_process.url, clip))
    assert trace["error"] is None and reply_bytes > 0
    after = serve_process.metrics()
    assert after[f"{TTFA}_count"] - before[f"{TTFA}_count"] == 1
    ttfa_s = after[f"{TTFA}_sum"] - before[f"{TTFA}_sum"]
    assert abs(ttfa_s * 1000 - trace["ttfa_ms"]) < 1, (ttfa_s, trace["ttfa_ms"])
    assert 0 < ttfa_s < 30
    # The bucket the TTFA falls in counts it; the one below does not.
    buckets = sorted(
        (float(key.split('le="')[1].rstrip('"}')), value - before[key])
        for key, value in after.items()
        if key.startswith(f"{TTFA}_bucket") and "+Inf" not in key
    )
    assert all(count == (1 if le >= ttfa_s else 0) for le, count in buckets), buckets
    for stage in ("endpoint", "llm_ttft", "tts_first_audio", "out"):
        key = f'voxrelay_stage_latency_seconds_count{{stage="{stage}"}}'
        assert after[key] - before.get(key, 0) == 1, stage
    completed = 'voxrelay_turns_total{outcome="completed"}'
    assert after[completed] - before[completed] == 1
    assert after["voxrelay_sessions"] == 0  # the client has gone
    for ring in ("audio_in", "asr_llm", "llm_tts", "audio_out", "tts_events"):
        assert f'voxrelay_ring_dropped_records_total{{ring="{ring}"}}' in after
    assert after['voxrelay_client_dropped_audio_bytes_total{direction="reply"}'] == 0


def test_a_killed_stage_counts_as_a_restart(serve_process, clips_dir):
    key = 'voxrelay_stage_restarts_total{stage="tts"}'
    before = serve_process.metrics()[key]
    os.kill(serve_process.stage_pids()["tts"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        samples = serve_process.metrics()
        if samples[key] == before + 1 and samples['voxrelay_stage_ready{stage="tts"}'] == 1:
            break
        assert time.monotonic() < deadline, samples
        time.sleep(0.1)
    trace, _ = asyncio.run(one_turn(serve_process.url, read_clip(clips_dir / "librivox/0880.wav")))
    assert trace["error"] is None


def test_metrics_need_the_token_when_the_server_has_one(serve_process):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{serve_process.base}/metrics", timeout=10)
    assert refused.value.code == 401
