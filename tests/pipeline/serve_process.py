"""A real `voxrelay serve` process for tests that talk to it from outside, as clients do."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fuzz-and-metrics-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class ServeProcess:
    def __init__(self, workdir: Path, *extra: str) -> None:
        self.trace_path = workdir / "serve-traces.jsonl"
        self.log_path = workdir / "serve.log"
        log = self.log_path.open("wb")
        env = {**os.environ, "VOXRELAY_LOG_DIR": str(workdir / "stage-logs")}
        # No standbys: these tests find stages by command line and bound the RSS of the
        # server and all its children, which a standby still loading would inflate. The
        # standby is tested through the Pipeline (test_reliability.py).
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "voxrelay.pipeline.cli",
                "-v",
                "serve",
                "--port",
                "0",
                "--token",
                TOKEN,
            ]
            + ["--trace", str(self.trace_path), "--no-warm-standby", *extra],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
        log.close()
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()  # blocks until it listens
        if "serving" not in line:
            self.process.kill()
            raise RuntimeError(f"voxrelay serve did not start: {self.log_tail()}")
        self.port = int(line.split("ws://127.0.0.1:")[1].split("/")[0])
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"ws://127.0.0.1:{self.port}/v1/voice"

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stage_pids(self) -> dict[str, int]:
        found = {}
        for child in psutil.Process(self.process.pid).children():
            cmdline = child.cmdline()
            if "voxrelay.pipeline.worker" in cmdline:
                found[cmdline[cmdline.index("voxrelay.pipeline.worker") + 1]] = child.pid
        return found

    def rss_bytes(self) -> int:
        """Resident memory of the server and its stage processes together."""
        parent = psutil.Process(self.process.pid)
        return sum(p.memory_info().rss for p in [parent, *parent.children()])

    def metrics(self) -> dict[str, float]:
        """Samples of GET /metrics: 'name{label="v",...}' -> value."""
        request = urllib.request.Request(f"{self.base}/metrics", headers=AUTH)
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


async def stream_clip(ws, clip, trailing_silence_s: float) -> None:
    """PCM16 at real-time pace in 20 ms frames, as a microphone would send it."""
    clip = clip.with_silence(trailing_silence_s)
    start = time.perf_counter()
    for index, frame in enumerate(clip.frames(20)):
        delay = start + index * 0.02 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await ws.send(frame)


# The silence a client streams after the clip, as a microphone would: past the learned
# end's 2.5 s fallback, so a turn whose end it is unsure of still ends (on a CPU whose
# int8 kernels round differently, "He was not an ill-disposed young man." waited past 1 s).
TURN_TAIL_S = 3.0


async def one_turn(url: str, clip, timeout_s: float = 90) -> tuple[dict, int]:
    """Streams the clip; returns the turn's `trace` event and the reply bytes received."""
    received = 0
    async with connect(f"{url}?sample_rate={clip.sample_rate}", additional_headers=AUTH) as ws:
        sender = asyncio.create_task(stream_clip(ws, clip, TURN_TAIL_S))
        async with asyncio.timeout(timeout_s):
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    received += len(message)
                    continue
                event = json.loads(message)
                if event["type"] == "trace":
                    await sender
                    return event, received
