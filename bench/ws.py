"""TTFA through the WebSocket endpoint, 1 and 4 concurrent sessions (issue 6).

Real clients on loopback stream real clips at real-time pace in 20 ms frames, then
silence; TTFA is read from each turn's `trace` event (end of the user's speech -> the
first reply sample leaving the pipeline for that client). The server, the pipeline
and the clients share the 2 cores, as they would on a small box.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from bench.e2e import corpus
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.ws import ServerConfig, VoiceServer

FRAME_MS = 20


async def stream_clip(ws: Any, clip: Clip, silence_s: float) -> None:
    """`clip` then `silence_s` of silence to `ws`, in FRAME_MS binary frames at real-time
    pace (paced against the start, so drift cannot build up)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for index, frame in enumerate(clip.with_silence(silence_s).frames(FRAME_MS)):
        delay = start + index * FRAME_MS / 1000 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await ws.send(frame)


async def _one_turn(port: int, clip: Clip) -> float | None:
    """Streams one clip; returns the turn's TTFA from its trace event."""
    url = f"ws://127.0.0.1:{port}/v1/voice?sample_rate={clip.sample_rate}"
    async with connect(url, max_size=None) as ws:
        sender = asyncio.create_task(stream_clip(ws, clip, 1.0))
        try:
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, str):
                    event: dict[str, Any] = json.loads(message)
                    if event["type"] == "trace":
                        ttfa = event.get("ttfa_ms")
                        return float(ttfa) if ttfa is not None else None
        finally:
            sender.cancel()


async def _measure(clips: list[Clip]) -> dict[int, list[float]]:
    measured: dict[int, list[float]] = {1: [], 4: []}
    # The 300 ms end of turn, as e2e's comparison runs: the transport's own cost on top of
    # e2e.ttfa_ms.p50.streaming (the learned end's TTFA is e2e's *.learned and *.natural).
    config = PipelineConfig(asr={"turn_detection": "silence"})
    async with Pipeline(config, transport_name="websocket") as pipeline:
        server = VoiceServer(pipeline, ServerConfig(port=0))
        port = await server.start()
        try:
            await _one_turn(port, clips[0])  # warm-up
            for clip in clips[:4]:
                ttfa = await _one_turn(port, clip)
                if ttfa is not None:
                    measured[1].append(ttfa)
            for round_start in (0, 4):
                batch = [clips[(round_start + i) % len(clips)] for i in range(4)]
                results = await asyncio.gather(*(_one_turn(port, c) for c in batch))
                measured[4] += [t for t in results if t is not None]
        finally:
            await server.stop()
    return measured


def run() -> dict[str, float]:
    clips = [clip for _name, clip in corpus()]
    measured = asyncio.run(_measure(clips))
    results: dict[str, float] = {}
    for sessions, values in measured.items():
        results[f"ws.turns.{sessions}"] = float(len(values))
        for pct in (50, 95):
            results[f"ws.ttfa_ms.p{pct}.{sessions}"] = (
                round(float(np.percentile(values, pct)), 1) if values else float("nan")
            )
    results["ws.ttfa_4_over_1.p50"] = round(
        results["ws.ttfa_ms.p50.4"] / results["ws.ttfa_ms.p50.1"], 2
    )
    return results


def table(results: dict[str, float]) -> str:
    lines = ["WebSocket endpoint: TTFA (ms) per turn, real clips at real-time pace",
             f"{'sessions':9} {'turns':>6} {'p50':>8} {'p95':>8}"]  # fmt: skip
    for sessions in (1, 4):
        lines.append(
            f"{sessions:<9} {results[f'ws.turns.{sessions}']:>6.0f} "
            f"{results[f'ws.ttfa_ms.p50.{sessions}']:>8.1f} "
            f"{results[f'ws.ttfa_ms.p95.{sessions}']:>8.1f}"
        )
    lines.append(f"4 concurrent / 1 session, p50: {results['ws.ttfa_4_over_1.p50']:.2f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
