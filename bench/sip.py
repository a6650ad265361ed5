"""TTFA over SIP, 1 and 4 concurrent calls (issue 7).

Python callers on loopback dial `voxrelay sip`, stream real clips narrowed to 8 kHz as
paced PCMU RTP (20 ms packets), then silence. TTFA is the end of the caller's speech
(the ASR's speech-end stamp) to the arrival of the first RTP packet of the reply at
the caller, both on the host's monotonic clock: what a caller hears, including the
resampling to 8 kHz, G.711 and the 20 ms packet pacing. `sip.rtp_out_ms` isolates
what the bridge adds: the pipeline's first reply sample leaving for the call's sink to
the first RTP packet arriving at the caller.
"""

from __future__ import annotations

import asyncio

import numpy as np
import soxr

from bench.e2e import corpus
from voxrelay.ipc.records import Stamp
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.sip.caller import Caller
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.server import SipServer
from voxrelay.pipeline.trace import TurnTrace


def _narrowband(clip: Clip, trailing_silence_s: float = 1.0) -> bytes:
    samples = soxr.resample(clip.mono_float(), clip.sample_rate, 8000)
    pcm = np.clip(samples * 32768, -32768, 32767).astype("<i2")
    return np.concatenate([pcm, np.zeros(int(8000 * trailing_silence_s), "<i2")]).tobytes()


def _answered(traces: list[TurnTrace]) -> list[TurnTrace]:
    return [t for t in traces if t.first_audio_out_ns and not t.error]


async def _one_call(server: SipServer, pcm16: bytes) -> tuple[float, float] | None:
    """One call, one turn; returns its (TTFA, bridge) ms, None if the turn failed."""
    caller = Caller(server.local)
    await caller.open()
    try:
        reply = await caller.dial()
        if reply.status != 200:
            return None
        call = server.calls[caller.call_id]
        await caller.stream(pcm16)
        async with asyncio.timeout(60):
            while not (caller.received and _answered(call.bridge.traces if call.bridge else [])):
                await asyncio.sleep(0.05)
        assert call.bridge is not None
        # The turn whose reply was heard: a clip the endpointer splits in two can have its
        # first part's reply cut by the second (barge-in); that turn played nothing.
        trace = min(_answered(call.bridge.traces), key=lambda t: t.first_audio_out_ns)
        speech_end_ns = trace.stamps.get(Stamp.SPEECH_END)
        await caller.hangup()
        if speech_end_ns is None:
            return None
        first_rtp_ns = caller.received[0][0]
        return (first_rtp_ns - speech_end_ns) / 1e6, (first_rtp_ns - trace.first_audio_out_ns) / 1e6
    except TimeoutError:
        return None
    finally:
        caller.close()


async def _measure(calls: list[bytes]) -> dict[int, list[tuple[float, float]]]:
    measured: dict[int, list[tuple[float, float]]] = {1: [], 4: []}
    # The 300 ms end of turn, as e2e's comparison runs: the transport's own cost on top of
    # e2e.ttfa_ms.p50.streaming (the learned end's TTFA is e2e's *.learned and *.natural).
    config = PipelineConfig(asr={"turn_detection": "silence"})
    async with Pipeline(config, transport_name="sip") as pipeline:
        server = SipServer(pipeline, SipConfig(port=0))
        await server.start()
        try:
            await _one_call(server, calls[0])  # warm-up
            for pcm16 in calls[:4]:
                ttfa = await _one_call(server, pcm16)
                if ttfa is not None:
                    measured[1].append(ttfa)
            for round_start in (0, 4):
                batch = [calls[(round_start + i) % len(calls)] for i in range(4)]
                results = await asyncio.gather(*(_one_call(server, c) for c in batch))
                measured[4] += [t for t in results if t is not None]
        finally:
            server.stop()
    return measured


def run() -> dict[str, float]:
    calls = [_narrowband(clip) for _name, clip in corpus()]
    measured = asyncio.run(_measure(calls))
    results: dict[str, float] = {}
    for count, pairs in measured.items():
        results[f"sip.turns.{count}"] = float(len(pairs))
        for index, name in enumerate(("ttfa_ms", "rtp_out_ms")):
            values = [pair[index] for pair in pairs]
            for pct in (50, 95):
                results[f"sip.{name}.p{pct}.{count}"] = (
                    round(float(np.percentile(values, pct)), 1) if values else float("nan")
                )
    results["sip.ttfa_4_over_1.p50"] = round(
        results["sip.ttfa_ms.p50.4"] / results["sip.ttfa_ms.p50.1"], 2
    )
    return results


def table(results: dict[str, float]) -> str:
    header = f"{'calls':9} {'turns':>6} {'p50':>8} {'p95':>8} {'bridge p50':>11} {'p95':>6}"
    lines = [
        "SIP bridge: TTFA (ms) per call, end of speech -> first reply RTP packet (PCMU);",
        "bridge: the pipeline's first reply sample -> that RTP packet at the caller",
        header,
    ]
    for count in (1, 4):
        lines.append(
            f"{count:<9} {results[f'sip.turns.{count}']:>6.0f} "
            f"{results[f'sip.ttfa_ms.p50.{count}']:>8.1f} "
            f"{results[f'sip.ttfa_ms.p95.{count}']:>8.1f} "
            f"{results[f'sip.rtp_out_ms.p50.{count}']:>11.1f} "
            f"{results[f'sip.rtp_out_ms.p95.{count}']:>6.1f}"
        )
    lines.append(f"4 concurrent / 1 call, p50: {results['sip.ttfa_4_over_1.p50']:.2f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
