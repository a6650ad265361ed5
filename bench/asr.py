"""ASR: end-of-speech latency at real-time pace, real-time factor and WER, tiny.en vs base.

Latency: each clip goes through a fresh `ASRStream` in 20 ms frames at real-time pace,
then 1 s of silence, as a live caller's audio would arrive. A frame's `arrival_ns` is
its real-time due time (the loop sleeps until then, so it is the feed time whenever the
stream keeps up; after a blocking decode the backlog keeps its true arrival times, as
the worker's input ring would). Latency = wall time the event was returned minus its
`speech_end_ns`, for every `SpeculativeEnd` and `Final`.

RTF and WER: every reference clip through `transcribe_file` as fast as the CPU allows
(VAD + end-of-utterance decodes, no partials), normalised as tests/asr does it.
"""

from __future__ import annotations

import time
from pathlib import Path

import jiwer
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.vad import SileroVADModel

from asr.config import ASRConfig
from asr.events import ASREvent, Final, SpeculativeEnd
from asr.stream import ASRStream, load_asr
from asr.transcribe import transcribe_file
from pipeline.models import asset_path
from tests.asr.clipdata import SAMPLE_RATE, read_clip, silence
from tests.asr.test_transcribe import normalize, references

MODELS = ("tiny.en", "base")
FRAME_SAMPLES = SAMPLE_RATE * 20 // 1000
FRAME_NS = 20_000_000
TRAILING_SILENCE_S = 1.0
# Real-time latency clips (20.5 s of speech, 7 clips, both corpora): base decodes ~2x
# slower than tiny.en, and all 11 clips twice in real time would take ~100 s.
REALTIME_CLIPS = (
    "librivox/0880.wav",
    "librivox/0890.wav",
    "librivox/0930.wav",
    "cards/001.wav",
    "cards/003.wav",
    "cards/005.wav",
    "goforward.raw",
)

Models = tuple[WhisperModel, SileroVADModel]


def _realtime_latencies(
    models: Models, config: ASRConfig, audio: np.ndarray
) -> dict[str, list[float]]:
    """Speech end -> event returned (ms) for one clip fed at real-time pace."""
    stream = ASRStream(config, *models)
    audio = np.concatenate([audio, silence(TRAILING_SILENCE_S)])
    latencies: dict[str, list[float]] = {"final": [], "speculative": []}
    start_ns = time.perf_counter_ns()
    arrival_ns = start_ns
    for offset in range(0, audio.size, FRAME_SAMPLES):
        arrival_ns = start_ns + (offset // FRAME_SAMPLES + 1) * FRAME_NS
        wait_s = (arrival_ns - time.perf_counter_ns()) / 1e9
        if wait_s > 0:
            time.sleep(wait_s)
        events = stream.feed(audio[offset : offset + FRAME_SAMPLES], SAMPLE_RATE, 1, arrival_ns)
        _collect(events, latencies)
    _collect(stream.flush(arrival_ns), latencies)
    return latencies


def _collect(events: list[ASREvent], latencies: dict[str, list[float]]) -> None:
    returned_ns = time.perf_counter_ns()
    for event in events:
        if isinstance(event, Final):
            latencies["final"].append((returned_ns - event.speech_end_ns) / 1e6)
        elif isinstance(event, SpeculativeEnd):
            latencies["speculative"].append((returned_ns - event.speech_end_ns) / 1e6)


def _offline(models: Models, config: ASRConfig, items: list) -> tuple[float, float, float]:
    """(WER, processing seconds, audio seconds) of every reference clip, fast as possible."""
    truths, hypotheses = [], []
    busy_s = audio_s = 0.0
    for path, raw, reference in items:
        audio_s += read_clip(path).size / SAMPLE_RATE
        started = time.perf_counter()
        text = transcribe_file(path, config, raw_s16le_16k=raw, models=models)
        busy_s += time.perf_counter() - started
        truths.append(normalize(reference))
        hypotheses.append(normalize(text))
    return float(jiwer.wer(truths, hypotheses)), busy_s, audio_s


def _measure(model: str, items: list, clips: Path) -> dict[str, float]:
    config = ASRConfig(model=model)
    models = load_asr(config)
    # The offline pass first: it also warms the model up before the timed real-time runs.
    wer, busy_s, audio_s = _offline(models, config, items)
    latencies: dict[str, list[float]] = {"final": [], "speculative": []}
    for name in REALTIME_CLIPS:
        for kind, values in _realtime_latencies(models, config, read_clip(clips / name)).items():
            latencies[kind] += values
    results = {
        f"asr.wer.{model}": round(wer, 3),
        f"asr.rtf.{model}": round(busy_s / audio_s, 3),
        f"asr.finals.{model}": float(len(latencies["final"])),
    }
    for kind, values in latencies.items():
        for pct in (50, 95):
            results[f"asr.{kind}_ms.p{pct}.{model}"] = round(float(np.percentile(values, pct)), 1)
    return results


def run() -> dict[str, float]:
    clips = asset_path("testclips")
    items = references(clips)
    results: dict[str, float] = {
        "asr.clips.offline": float(len(items)),
        "asr.clips.realtime": float(len(REALTIME_CLIPS)),
    }
    for model in MODELS:
        results.update(_measure(model, items, clips))
    for key in ("final_ms.p50", "speculative_ms.p50", "rtf"):
        results[f"asr.base_over_tiny.{key}"] = round(
            results[f"asr.{key}.base"] / results[f"asr.{key}.tiny.en"], 2
        )
    return results


def table(results: dict[str, float]) -> str:
    lines = [
        f"ASR: speech end -> event (ms) over {results['asr.clips.realtime']:.0f} clips at "
        f"real-time pace; RTF and WER over {results['asr.clips.offline']:.0f} clips",
        f"{'model':8} {'final p50':>10} {'p95':>8} {'spec p50':>9} {'p95':>8} "
        f"{'RTF':>7} {'WER':>6}",
    ]
    for model in MODELS:
        lines.append(
            f"{model:8} {results[f'asr.final_ms.p50.{model}']:>10.1f} "
            f"{results[f'asr.final_ms.p95.{model}']:>8.1f} "
            f"{results[f'asr.speculative_ms.p50.{model}']:>9.1f} "
            f"{results[f'asr.speculative_ms.p95.{model}']:>8.1f} "
            f"{results[f'asr.rtf.{model}']:>7.3f} {results[f'asr.wer.{model}']:>6.3f}"
        )
    lines.append(
        f"base / tiny.en: final p50 {results['asr.base_over_tiny.final_ms.p50']:.2f}x, "
        f"speculative p50 {results['asr.base_over_tiny.speculative_ms.p50']:.2f}x, "
        f"RTF {results['asr.base_over_tiny.rtf']:.2f}x"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
