"""How `bench.turn_end`'s turns are heard: each one streamed through an `ASRStream` in
20 ms frames at real-time pace, the LLM's probability of the end of turn from the native
engine in this process (the probe the LLM stage runs), and the splice set made from the
pocketsphinx clips."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
from faster_whisper import WhisperModel

from tests.asr.clipdata import SAMPLE_RATE, T0_NS, read_clip, silence, trim
from tests.asr.natural import (
    POCKETSPHINX,
    Turn,
    has_true_end,
    lecture_turns,
    natural_turns,
    phenomena_turns,
    quietest_near,
    unscripted_turns,
    unvoiced_run,
    voiced_windows,
)
from tests.asr.spoken_requests import request_turns
from voxrelay.asr.events import SpeculativeEnd
from voxrelay.asr.models import ASRModels
from voxrelay.asr.stream import ASRStream
from voxrelay.pipeline.models import asset_path

if TYPE_CHECKING:
    from voxrelay.llm.native_backend import NativeBackend
    from voxrelay.llm.sequence import TokenOutput

# The LLM's probability reaches the stream this long after the SpeculativeEnd (the
# stage's measured first-token time, `e2e.llm_ttft_ms`).
HINT_DELAY_MS = 40
FRAME_MS = 20
TAIL_S = 3.0
SEED = 7
PAUSE_S = (0.2, 2.5)  # eot-bench's mid-turn pause lengths, the spliced ones drawn from


def first_outputs(
    backend: NativeBackend,
    prompts: Mapping[int, str],
    before_abort: Callable[[TokenOutput], None] | None = None,
) -> dict[int, TokenOutput]:
    """Submit every prompt and step until each request's first token is out (it carries
    the probe's P(<|im_end|>)); `before_abort` sees it while the request still lives
    (its probe's hidden state, bench/turn_head.py); then each request is aborted."""
    for request_id, prompt in prompts.items():
        backend.submit(request_id, prompt)
    done: dict[int, TokenOutput] = {}
    while len(done) < len(prompts):
        for output in backend.step():
            if output.request_id in done:
                continue
            done[output.request_id] = output
            if before_abort is not None:
                before_abort(output)
            backend.abort(output.request_id)
    return done


def text_prober() -> Callable[[str], float | None]:
    """P(<|im_end|>) after `text` from the native engine: the LLM stage's own probe."""
    from voxrelay.llm.dialogue import Dialogue, llm_config
    from voxrelay.llm.native_backend import NativeBackend

    config = llm_config({})
    backend = NativeBackend(config)
    dialogue = Dialogue()
    ids = itertools.count(1)

    def probe(text: str) -> float | None:
        request_id = next(ids)
        prompt = dialogue.prompt_text(backend, config, text)
        output: TokenOutput = first_outputs(backend, {request_id: prompt})[request_id]
        return output.probe_prob

    return probe


def stream_turn(
    stream: ASRStream, audio: np.ndarray, probe: Callable[[str], float | None]
) -> list[tuple[int, object]]:
    """Feed `audio` then TAIL_S of silence as 20 ms frames; each SpeculativeEnd's text
    probability reaches the stream HINT_DELAY_MS later, or the next frame when the probe
    has none (None, as a backend that does not probe says at once). (arrival_ns, event)
    pairs."""
    audio = np.concatenate([audio, silence(TAIL_S)])
    frame = SAMPLE_RATE * FRAME_MS // 1000
    hints: list[tuple[int, int, float | None]] = []  # (due frame, utterance, probability)
    events: list[tuple[int, object]] = []
    for index, offset in enumerate(range(0, audio.size, frame)):
        arrival_ns = T0_NS + (offset + frame) * 1_000_000_000 // SAMPLE_RATE
        new = stream.feed(audio[offset : offset + frame], SAMPLE_RATE, 1, arrival_ns)
        stream.score_pending()
        for due, utterance, prob in [h for h in hints if h[0] <= index]:
            hints.remove((due, utterance, prob))
            new += stream.hint(utterance, prob)
        for event in new:
            if isinstance(event, SpeculativeEnd):
                prob = probe(event.text)
                delay = 0 if prob is None else HINT_DELAY_MS // FRAME_MS
                hints.append((index + delay, event.utterance_id, prob))
        events += [(arrival_ns, event) for event in new]
    events += [(arrival_ns, event) for event in stream.flush(arrival_ns)]
    return events


def all_sets(models: ASRModels) -> dict[str, list[Turn]]:
    """`bench.turn_end`'s six sets, by name (its docstring says what each holds)."""
    natural_root = asset_path("naturalclips")
    return {
        "natural": natural_turns(natural_root, asset_path("testclips"), models.vad),
        "splice": splice_turns(models.whisper["base"], models),
        "requests": request_turns(models.vad),
        "lecture": lecture_turns(natural_root, models.vad),
        "unscripted": unscripted_turns(natural_root, models.vad),
        "phenomena": phenomena_turns(natural_root, models.vad),
    }


def _spliced(
    clip: np.ndarray, at: int, added: int, vad_model: object
) -> tuple[np.ndarray, tuple[int, int]]:
    """`clip` with `added` samples of silence put in at `at`, and the run of unvoiced
    Silero windows heard around them."""
    audio = np.concatenate([clip[:at], silence(added / SAMPLE_RATE), clip[at:]])
    return audio, unvoiced_run(voiced_windows(audio, vad_model), at + added // 2)


def splice_turns(aligner: WhisperModel, models: ASRModels) -> list[Turn]:
    """One turn per word boundary of every clip, with a pause of PAUSE_S (uniform, seeded)
    there: the whole silence the listener hears, the word boundary's own included (the
    silence put in is the drawn length less the unvoiced run already at the boundary).
    The pause is labelled as the natural set's are: the spliced audio's run of unvoiced
    Silero windows around the boundary."""
    rng = np.random.default_rng(SEED)
    root = asset_path("testclips")
    turns = []
    for name in POCKETSPHINX:
        clip = trim(read_clip(root / name))
        segments, _ = aligner.transcribe(clip, language="en", word_timestamps=True)
        words = [word for segment in segments for word in segment.words]
        true_end = has_true_end(name)  # a continued reading: its pause counts, its end not
        voiced = voiced_windows(clip, models.vad)
        for word in words[:-1]:
            at = quietest_near(clip, int(word.end * SAMPLE_RATE))
            first, last = unvoiced_run(voiced, at)
            pause = int(rng.uniform(*PAUSE_S) * SAMPLE_RATE)
            added = max(pause - (last - first), 0)
            audio, heard = _spliced(clip, at, added, models.vad)
            assert heard[1] > heard[0], f"{name}@{at}: Silero heard the pause as speech"
            # Silero's state carries across the boundary, so the run it hears differs
            # from the sum by a window or a few: one correction brings it to the draw
            # (not below what makes the boundary a pause at all).
            added = max(added + pause - (heard[1] - heard[0]), 0)
            corrected, heard_corrected = _spliced(clip, at, added, models.vad)
            if heard_corrected[1] > heard_corrected[0]:
                audio, heard = corrected, heard_corrected
            end = audio.size - int(0.1 * SAMPLE_RATE)  # trim's margin after the words
            turns.append(Turn(f"{name}@{at}", audio, (heard,), end, true_end))
    return turns
