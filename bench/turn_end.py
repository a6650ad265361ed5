"""Mid-sentence pauses: how often does a pause cut the user's turn in two, with and
without the hold on unfinished words (asr/turn_end.py)?

Every real clip of the test corpus, cut at each word boundary in turn (Whisper base's
word times, moved to the quietest 20 ms within 100 ms), with PAUSE_S of silence put in:
one variant per boundary. Each variant goes through a fresh `ASRStream` (base and tiny.en,
the two models "auto" picks between; the pipeline's settings, partials off: the end of
turn reads the decode at the pause), fed as fast as the CPU allows with arrival times at
real-time pace, twice: with the hold and with `unfinished_end_silence_ms=0`. A variant
whose words come out as more than one Final was cut. The untouched clips, once each with
the hold, count complete turns held (such a turn is answered ~700 ms later).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from faster_whisper import WhisperModel

from tests.asr.clipdata import SAMPLE_RATE, feed_frames, read_clip, silence, trim
from voxrelay.asr.config import AUTO_MODELS, ASRConfig
from voxrelay.asr.events import Final
from voxrelay.asr.models import ASRModels, load_asr
from voxrelay.asr.stream import ASRStream
from voxrelay.pipeline.models import asset_path

PAUSE_S = 0.6  # twice the end of turn, well under the hold
CLIPS = (
    "goforward.raw",
    "something.raw",
    "numbers.raw",
    *(f"librivox/0{n}.wav" for n in (870, 880, 890, 920, 930)),
    *(f"cards/00{n}.wav" for n in range(1, 6)),
    "forever/input_2_16k.wav",
    "forever/input_4_16k.wav",
)
MODELS = AUTO_MODELS
SEARCH = SAMPLE_RATE // 10
FRAME = SAMPLE_RATE // 50


def _quietest_near(audio: np.ndarray, at: int) -> int:
    """The middle of the quietest 20 ms frame (10 ms steps) within SEARCH of `at`."""
    starts = range(max(at - SEARCH, 0), min(at + SEARCH, audio.size - FRAME), FRAME // 2)
    energy = [float(np.mean(audio[start : start + FRAME] ** 2)) for start in starts]
    return starts[int(np.argmin(energy))] + FRAME // 2


def _boundaries(aligner: WhisperModel, audio: np.ndarray) -> list[int]:
    segments, _ = aligner.transcribe(audio, language="en", word_timestamps=True)
    words = [word for segment in segments for word in segment.words]
    return [_quietest_near(audio, int(word.end * SAMPLE_RATE)) for word in words[:-1]]


def _turns(config: ASRConfig, models: ASRModels, audio: np.ndarray) -> tuple[int, bool]:
    """(Finals, whether the last one was held) of one pass of `audio` and a trailing second
    of silence. Held: it came nearer the held end of turn than the usual one after the
    speech ended (a hold at a pause inside a clip, which is right, does not count)."""
    events = feed_frames(ASRStream(config, models), audio)
    finals = [(at, e) for at, e in events if isinstance(e, Final)]
    at, last = finals[-1]
    late_ms = (config.end_silence_ms + config.unfinished_end_silence_ms) / 2
    return len(finals), (at - last.speech_end_ns) / 1e6 > late_ms


def run() -> dict[str, float]:
    models = load_asr(ASRConfig(model="auto"))
    aligner = models.whisper["base"]
    root = asset_path("testclips")
    clips = [trim(read_clip(root / name)) for name in CLIPS]
    boundaries = [_boundaries(aligner, clip) for clip in clips]
    results = {"turn_end.pauses": float(sum(map(len, boundaries)))}
    results["turn_end.whole_turns"] = float(len(CLIPS))
    for model in MODELS:
        holding = ASRConfig(model=model, partial_interval_ms=0)
        fixed = replace(holding, unfinished_end_silence_ms=0)
        cut = {"held": 0, "fixed": 0}
        whole_held = 0
        for clip, cuts in zip(clips, boundaries, strict=True):
            tail = silence(1.0)
            whole_held += _turns(holding, models, np.concatenate([clip, tail]))[1]
            # Some clips are two utterances already (cards/005); a cut adds a Final.
            finals_whole = _turns(fixed, models, np.concatenate([clip, tail]))[0]
            for at in cuts:
                audio = np.concatenate([clip[:at], silence(PAUSE_S), clip[at:], tail])
                cut["held"] += _turns(holding, models, audio)[0] > finals_whole
                cut["fixed"] += _turns(fixed, models, audio)[0] > finals_whole
        pauses = results["turn_end.pauses"]
        results[f"turn_end.whole_held.{model}"] = float(whole_held)
        results[f"turn_end.cut_pct.fixed.{model}"] = round(100 * cut["fixed"] / pauses, 1)
        results[f"turn_end.cut_pct.held.{model}"] = round(100 * cut["held"] / pauses, 1)
    return results


def table(results: dict[str, float]) -> str:
    lines = [
        f"mid-sentence pauses of {PAUSE_S * 1000:.0f} ms, {results['turn_end.pauses']:.0f} "
        f"cuts of {results['turn_end.whole_turns']:.0f} real clips: turn cut in two (%)",
        f"{'model':9} {'fixed':>7} {'held':>7} {'whole clips held':>17}",
    ]
    for model in MODELS:
        lines.append(
            f"{model:9} {results[f'turn_end.cut_pct.fixed.{model}']:>7.1f} "
            f"{results[f'turn_end.cut_pct.held.{model}']:>7.1f} "
            f"{results[f'turn_end.whole_held.{model}']:>17.0f}"
        )
    config = ASRConfig()
    lines.append(
        f"(fixed: {config.end_silence_ms} ms end of turn; held: "
        f"{config.unfinished_end_silence_ms} ms after unfinished words)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
