"""ASR: end-of-speech latency at real-time pace, real-time factor and WER, tiny.en vs base.

Latency: each clip goes through a fresh `ASRStream` (the 300 ms silence rule) in 20 ms
frames at real-time pace, then 1 s of silence, as a live caller's audio would arrive. A
frame's `arrival_ns` is its real-time due time (the loop sleeps until then, so it is the
feed time whenever the stream keeps up; after a blocking decode the backlog keeps its
true arrival times, as the worker's input ring would). Latency = wall time the event was
returned minus its `speech_end_ns`, for every `SpeculativeEnd` and `Final`.

RTF and WER: every reference clip through `transcribe_file` as fast as the CPU allows
(VAD + end-of-utterance decodes, no partials), normalised as tests/asr does it.

tiny.en's real-time clips also go through CTranslate2's own text decoder
(`text_decoder="ctranslate2"`), clip by clip in turn with the native one, so the two
decoders' latencies and real-time WER (the Finals of the streamed clips, partials on)
come from the same minutes. Likewise base's through the PyTorch bfloat16 encoder
(`encoder="bfloat16"`, asr/encoder.py) beside the default CTranslate2 int8 one, with its
own RTF and WER.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jiwer
import numpy as np

from tests.asr.clipdata import SAMPLE_RATE, read_clip, silence
from tests.asr.test_transcribe import normalize, references
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.encoder import amx_available
from voxrelay.asr.events import ASREvent, Final, SpeculativeEnd
from voxrelay.asr.models import ASRModels, load_asr
from voxrelay.asr.stream import ASRStream
from voxrelay.asr.transcribe import transcribe_file
from voxrelay.pipeline.models import asset_path

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


def _realtime_latencies(
    models: ASRModels, config: ASRConfig, audio: np.ndarray
) -> tuple[dict[str, list[float]], str]:
    """Speech end -> event returned (ms) for one clip fed at real-time pace, and the
    clip's transcript (its Finals joined)."""
    stream = ASRStream(config, models)
    audio = np.concatenate([audio, silence(TRAILING_SILENCE_S)])
    latencies: dict[str, list[float]] = {"final": [], "speculative": []}
    texts: list[str] = []
    start_ns = time.perf_counter_ns()
    arrival_ns = start_ns
    for offset in range(0, audio.size, FRAME_SAMPLES):
        arrival_ns = start_ns + (offset // FRAME_SAMPLES + 1) * FRAME_NS
        wait_s = (arrival_ns - time.perf_counter_ns()) / 1e9
        if wait_s > 0:
            time.sleep(wait_s)
        events = stream.feed(audio[offset : offset + FRAME_SAMPLES], SAMPLE_RATE, 1, arrival_ns)
        _collect(events, latencies, texts)
    _collect(stream.flush(arrival_ns), latencies, texts)
    return latencies, " ".join(texts)


def _collect(events: list[ASREvent], latencies: dict[str, list[float]], texts: list[str]) -> None:
    returned_ns = time.perf_counter_ns()
    for event in events:
        if isinstance(event, Final):
            latencies["final"].append((returned_ns - event.speech_end_ns) / 1e6)
            texts.append(event.text)
        elif isinstance(event, SpeculativeEnd):
            latencies["speculative"].append((returned_ns - event.speech_end_ns) / 1e6)


def _offline(models: ASRModels, config: ASRConfig, items: list) -> tuple[float, float, float]:
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
    # The silence rule: the learned end waits for the LLM's probability, which this
    # harness has no LLM to send (bench/turn_end.py measures the learned end).
    config = ASRConfig(model=model, turn_detection="silence")
    models = load_asr(config)
    # The offline pass first: it also warms the model up before the timed real-time runs.
    wer, busy_s, audio_s = _offline(models, config, items)
    variants = {model: config}
    if model == "tiny.en":  # the text decoders side by side, clip by clip (same minutes)
        variants[f"{model}.ctranslate2"] = dataclasses.replace(config, text_decoder="ctranslate2")
    results = {
        f"asr.wer.{model}": round(wer, 3),
        f"asr.rtf.{model}": round(busy_s / audio_s, 3),
    }
    if model == "base":  # the encoders side by side: PyTorch bfloat16 against CTranslate2's
        bf16 = dataclasses.replace(config, encoder="bfloat16")
        variants[f"{model}.bfloat16_encoder"] = bf16
        wer, busy_s, audio_s = _offline(load_asr(bf16), bf16, items)
        results[f"asr.wer.{model}.bfloat16_encoder"] = round(wer, 3)
        results[f"asr.rtf.{model}.bfloat16_encoder"] = round(busy_s / audio_s, 3)
        results["asr.cpu_has_amx"] = float(amx_available())
    references = {path.relative_to(clips).as_posix(): text for path, _raw, text in items}
    latencies = {name: {"final": [], "speculative": []} for name in variants}
    heard: dict[str, list[str]] = {name: [] for name in variants}
    for clip in REALTIME_CLIPS:
        audio = read_clip(clips / clip)
        for name, variant in variants.items():
            clip_latencies, text = _realtime_latencies(models, variant, audio)
            for kind, values in clip_latencies.items():
                latencies[name][kind] += values
            heard[name].append(normalize(text))
    truths = [normalize(references[clip]) for clip in REALTIME_CLIPS]
    for name in variants:
        results[f"asr.finals.{name}"] = float(len(latencies[name]["final"]))
        results[f"asr.wer_realtime.{name}"] = round(float(jiwer.wer(truths, heard[name])), 3)
        for kind, values in latencies[name].items():
            for pct in (50, 95):
                value = float(np.percentile(values, pct))
                results[f"asr.{kind}_ms.p{pct}.{name}"] = round(value, 1)
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
    for key in ("final_ms.p50", "speculative_ms.p50", "speculative_ms.p95"):
        results[f"asr.native_over_ctranslate2.{key}"] = round(
            results[f"asr.{key}.tiny.en"] / results[f"asr.{key}.tiny.en.ctranslate2"], 2
        )
    for key in ("final_ms.p50", "speculative_ms.p50", "speculative_ms.p95", "rtf"):
        results[f"asr.bfloat16_over_ctranslate2_encoder.{key}"] = round(
            results[f"asr.{key}.base.bfloat16_encoder"] / results[f"asr.{key}.base"], 2
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
    native, ct2 = "tiny.en", "tiny.en.ctranslate2"
    lines.append(
        "tiny.en text decoder, native (draft-checked) vs CTranslate2, same clips in turn: "
        f"speculative p50 {results[f'asr.speculative_ms.p50.{native}']:.1f} vs "
        f"{results[f'asr.speculative_ms.p50.{ct2}']:.1f} ms "
        f"({results['asr.native_over_ctranslate2.speculative_ms.p50']:.2f}x), "
        f"p95 {results[f'asr.speculative_ms.p95.{native}']:.1f} vs "
        f"{results[f'asr.speculative_ms.p95.{ct2}']:.1f}, real-time WER "
        f"{results[f'asr.wer_realtime.{native}']:.3f} vs {results[f'asr.wer_realtime.{ct2}']:.3f}"
    )
    bf16 = "base.bfloat16_encoder"
    amx = "AMX" if results["asr.cpu_has_amx"] else "no AMX"
    lines.append(
        f"base encoder, PyTorch bfloat16 ({amx}) vs CTranslate2 int8 (default), same clips in "
        f"turn: speculative p50 {results[f'asr.speculative_ms.p50.{bf16}']:.1f} vs "
        f"{results['asr.speculative_ms.p50.base']:.1f} ms "
        f"({results['asr.bfloat16_over_ctranslate2_encoder.speculative_ms.p50']:.2f}x), "
        f"RTF {results[f'asr.rtf.{bf16}']:.3f} vs {results['asr.rtf.base']:.3f}, "
        f"WER {results[f'asr.wer.{bf16}']:.3f} vs {results['asr.wer.base']:.3f}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
