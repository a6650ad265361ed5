"""TTS: time from the first LLM token to the first audio sample, partial-input vs
sentence-level synthesis, the vocoder in chunks vs whole, and the real-time factor.

Each reply is tokenized with the SmolLM2 tokenizer and its text deltas arrive one per
TOKEN_GAP_S, in real time, as the LLM would stream them. Partial-input: every delta goes
into the pipeline's `Chunker` and a released fragment is synthesized at once. Sentence-
level: the text waits for the whole first sentence, which is then synthesized. First
audio = the first `AudioChunk` out of `Voice.synthesize` minus the first token's arrival.
"partial" is the pipeline's default (the first fragment's audio comes out of the vocoder
in chunks, tts/vocoder.py); "partial_whole" the same fragments with the vocoder run on
each sentence whole (`first_chunk_frames=0`, the stage before session 8); "sentence"
synthesizes the whole first sentence whole, as a sentence-streaming design does.
"stage" and "ahead" drive the stage's own handler (tts/worker.py) with the deltas as token
records, first audio = its first AUDIO_OUT record: "ahead" as it runs, starting the first
fragment's first chunk while it waits for the delta that confirms the cut, "stage" with
that off (`synthesize_ahead=False`). All modes run on the same reply back to back, so
machine load hits them alike.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from voxrelay.ipc.records import TOKEN_ID, Record, RecordKind
from voxrelay.llm.gguf_loader import GGUFFile, read_tokenizer_data
from voxrelay.llm.tokenizer import ChatTokenizer
from voxrelay.pipeline.models import asset_path
from voxrelay.tts.chunker import Chunker
from voxrelay.tts.config import TTSConfig
from voxrelay.tts.voice import Voice
from voxrelay.tts.worker import TTSHandler

TOKEN_GAP_S = 0.045  # ~22 tok/s: the native engine's decode rate on this box
ROUNDS = 2
REPLIES = (
    "Sure, I can help with that. The train to Boston leaves at nine fifteen from platform four.",
    "Well, it depends on the weather. If it rains, take the bus instead of walking.",
    "The capital of Australia is Canberra, not Sydney, as many people think.",
    "I have set a timer for twenty minutes. I will let you know when it is done.",
    "Good question! Bananas are berries, but strawberries are not, at least to a botanist.",
    "Your meeting with Anna was moved to Thursday afternoon at three o'clock.",
    "Okay, here is a quick tip: drink a glass of water before every meal.",
    "It looks like the store closes at eight tonight, so you still have two hours.",
)
# A sentence is complete once its mark is followed by a space (or the reply ends).
_SENTENCE_END = re.compile(r"[.?!]+(?=\s)")
MODES = ("partial", "partial_whole", "sentence", "stage", "ahead")


def _deltas(tokenizer: ChatTokenizer, text: str) -> list[str]:
    detokenizer = tokenizer.detokenizer()
    return [detokenizer.push(token) for token in tokenizer.encode(text)] + [detokenizer.flush()]


def _paced(deltas: list[str]) -> Iterator[tuple[float, str]]:
    """(arrival time of the first delta, delta), each delta yielded at its due time."""
    first = time.perf_counter()
    for index, delta in enumerate(deltas):
        wait = first + index * TOKEN_GAP_S - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        yield first, delta


def _first_audio_ms(voice: Voice, fragment: str, first_token: float) -> float:
    next(iter(voice.synthesize(fragment, final=False)))
    return (time.perf_counter() - first_token) * 1000


def partial_first_audio_ms(voice: Voice, config: TTSConfig, deltas: list[str]) -> float:
    chunker = Chunker(config)
    first = time.perf_counter()
    for first, delta in _paced(deltas):
        fragments = chunker.push(delta)
        if fragments:
            return _first_audio_ms(voice, fragments[0], first)
    return _first_audio_ms(voice, chunker.flush()[0], first)


def sentence_first_audio_ms(voice: Voice, deltas: list[str]) -> float:
    text = ""
    first = time.perf_counter()
    for first, delta in _paced(deltas):
        text += delta
        end = _SENTENCE_END.search(text)
        if end:
            return _first_audio_ms(voice, text[: end.end()].strip(), first)
    return _first_audio_ms(voice, text.strip(), first)


class _FirstAudioOut:
    """The handler's sender: notes when the first reply audio record leaves."""

    def __init__(self) -> None:
        self.first_audio = 0.0

    def send(self, kind: RecordKind, *parts: bytes, **_: Any) -> bool:
        if kind == RecordKind.AUDIO_OUT and not self.first_audio:
            self.first_audio = time.perf_counter()
        return True


class _NoEvents:
    def stamp(self, *args: Any, **kwargs: Any) -> None:
        pass


def stage_first_audio_ms(handler: TTSHandler, turn: int, deltas: list[str]) -> float:
    """The deltas as token records into the stage's handler, stepped as its loop steps
    it (pipeline/worker.py: after each record, and while idle)."""
    out = _FirstAudioOut()
    handler.out = out  # type: ignore[assignment]
    first = 0.0
    for arrived, delta in _paced(deltas):
        first = arrived
        payload = TOKEN_ID.pack(0) + delta.encode()
        handler.handle(Record(RecordKind.TOKEN, 0, 1, turn, 0, 0, payload))
        while handler.step() and not out.first_audio:
            pass
        if out.first_audio:
            break
    handler.handle(Record(RecordKind.RESUME, 0, 1, turn, 0, 0, b""))  # drop the rest
    assert out.first_audio, "the reply made no audio"
    return (out.first_audio - first) * 1000


def run() -> dict[str, float]:
    config = TTSConfig(voice_dir=asset_path("joe"))
    voice = Voice(config)
    whole = Voice(TTSConfig(voice_dir=asset_path("joe"), first_chunk_frames=0))
    tokenizer = ChatTokenizer(read_tokenizer_data(GGUFFile(asset_path("smollm2") / "model.gguf")))
    replies = [_deltas(tokenizer, reply) for reply in REPLIES]
    events = _NoEvents()
    stages = {
        mode: TTSHandler({"synthesize_ahead": mode == "ahead"}, _FirstAudioOut(), events)  # type: ignore[arg-type]
        for mode in ("stage", "ahead")
    }
    turns = itertools.count(1)
    first_audio: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(ROUNDS):
        for deltas in replies:
            first_audio["partial"].append(partial_first_audio_ms(voice, config, deltas))
            first_audio["partial_whole"].append(partial_first_audio_ms(whole, config, deltas))
            first_audio["sentence"].append(sentence_first_audio_ms(whole, deltas))
            for mode, handler in stages.items():
                first_audio[mode].append(stage_first_audio_ms(handler, next(turns), deltas))
    synth_s = audio_s = 0.0
    for reply in REPLIES:
        started = time.perf_counter()
        samples = sum(chunk.pcm.size for chunk in voice.synthesize_text(reply))
        synth_s += time.perf_counter() - started
        audio_s += samples / voice.sample_rate
    results: dict[str, float] = {
        "tts.replies": float(len(REPLIES)),
        "tts.token_gap_ms": TOKEN_GAP_S * 1000,
        "tts.rtf": round(synth_s / audio_s, 3),
    }
    for mode, values in first_audio.items():
        for pct in (50, 95):
            results[f"tts.first_audio_ms.p{pct}.{mode}"] = round(
                float(np.percentile(values, pct)), 1
            )
    results["tts.first_audio_partial_over_sentence"] = round(
        results["tts.first_audio_ms.p50.partial"] / results["tts.first_audio_ms.p50.sentence"], 3
    )
    results["tts.first_audio_chunked_over_whole"] = round(
        results["tts.first_audio_ms.p50.partial"] / results["tts.first_audio_ms.p50.partial_whole"],
        3,
    )
    results["tts.first_audio_ahead_over_stage"] = round(
        results["tts.first_audio_ms.p50.ahead"] / results["tts.first_audio_ms.p50.stage"], 3
    )
    return results


def table(results: dict[str, float]) -> str:
    lines = [
        f"TTS: first LLM token -> first audio (ms), {results['tts.replies']:.0f} replies x "
        f"{ROUNDS}, one token per {results['tts.token_gap_ms']:.0f} ms",
        f"{'mode':13} {'p50':>8} {'p95':>8}",
    ]
    for mode in MODES:
        lines.append(
            f"{mode:13} {results[f'tts.first_audio_ms.p50.{mode}']:>8.1f} "
            f"{results[f'tts.first_audio_ms.p95.{mode}']:>8.1f}"
        )
    lines.append(
        f"partial / sentence p50 = {results['tts.first_audio_partial_over_sentence']:.3f}; "
        f"vocoder chunked / whole p50 = {results['tts.first_audio_chunked_over_whole']:.3f}; "
        f"synthesis RTF {results['tts.rtf']:.3f}"
    )
    lines.append(
        "the stage's handler, first fragment started ahead of its cut / not: p50 "
        f"{results['tts.first_audio_ahead_over_stage']:.3f}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
