"""Run the built image and talk to it: the container's own health check, then real turns.

    docker build -t voxrelay .
    .venv/bin/python -m scripts.container_check [IMAGE]

Starts IMAGE (default `voxrelay`) with its own command (`voxrelay serve` on port 8765)
and host networking (a daemon with no bridge can publish no port), waits for Docker's
HEALTHCHECK to report healthy (the image's own check: `/metrics`, every
stage ready), streams test clips over `/v1/voice` at real-time pace as a client would,
and wants a transcript, reply text and reply audio for each; then stops the container.
Prints what it saw and exits non-zero on the first failure. Needs a Docker daemon (none
in CI here; docs/scaling.md, "The container", has the run it made).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from websockets.asyncio.client import connect

from bench.e2e import corpus
from bench.ws import stream_clip
from voxrelay.pipeline.audio_io import Clip

HEALTHY_WITHIN_S = 300


def _health(container: str) -> str:
    out = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Health.Status}} {{.State.Status}}", container],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


async def _turn(port: int, clip: Clip) -> dict[str, Any]:
    """One clip then 1.5 s of silence; the turn's trace, with the reply bytes counted."""
    url = f"ws://127.0.0.1:{port}/v1/voice?sample_rate={clip.sample_rate}"
    audio_bytes = 0
    async with connect(url, max_size=None) as ws:
        sender = asyncio.create_task(stream_clip(ws, clip, 1.5))
        try:
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    audio_bytes += len(message)
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    raise AssertionError(f"server error: {event}")
                if event["type"] == "trace":
                    return {**event, "audio_bytes": audio_bytes}
        finally:
            sender.cancel()


def main(image: str = "voxrelay", port: int = 8765) -> int:
    container = "voxrelay-check"
    command = ["docker", "run", "-d", "--rm", "--name", container, "--network", "host", image]
    subprocess.run(command, check=True, capture_output=True)
    started = time.monotonic()
    try:
        while (status := _health(container)).split()[0] != "healthy":
            if "running" not in status or time.monotonic() - started > HEALTHY_WITHIN_S:
                logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
                print(logs.stdout[-3000:], logs.stderr[-3000:], file=sys.stderr)
                raise AssertionError(f"container not healthy: {status}")
            time.sleep(2)
        print(f"healthy after {time.monotonic() - started:.0f} s (the image's HEALTHCHECK)")
        for name, clip in corpus()[:3]:
            row = asyncio.run(_turn(port, clip))
            print(f"{name}: {row['transcript']!r} -> {row['reply_text']!r}, "
                  f"{row['audio_bytes']} B of reply audio, TTFA {row['ttfa_ms']} ms")  # fmt: skip
            assert row["transcript"] and row["reply_text"] and row["audio_bytes"] > 0, row
    finally:
        subprocess.run(["docker", "stop", container], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
