"""Mid-sentence pauses: how often does a pause cut the user's turn in two, with and
without the hold on unfinished words (asr/turn_end.py)?

Every real clip of the test corpus, cut at each word boundary in turn (Whisper base's
word times, moved to the quietest 20 ms within 100 ms), with PAUSE_S of silence put in:
one variant per boundary. Each variant goes through a fresh `ASRStream` (tiny.en, the
pipeline's settings, partials off: the end of turn reads the decode at the pause), fed
as fast as the CPU allows with arrival times at real-time pace, twice: with the hold and
with `unfinished_end_silence_ms=0`. A variant whose words come out as more than one
Final was cut. The untouched clips, once each with the hold, count complete turns held
(a held complete turn answers `unfinished_end_silence_ms` later).
"""

from __future__ import annotations

import numpy as np
from faster_whisper import WhisperModel

from asr.config import ASRConfig
from asr.events import Final, Hold
from asr.stream import ASRStream, load_asr
from pipeline.models import asset_path
from tests.asr.clipdata import SAMPLE_RATE, feed_frames, read_clip, silence, trim

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
HOLDING = ASRConfig(partial_interval_ms=0)
FIXED = ASRConfig(partial_interval_ms=0, unfinished_end_silence_ms=0)
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


def _turns(config: ASRConfig, models: tuple, audio: np.ndarray) -> tuple[int, int]:
    """(Finals, Holds) of one pass of `audio` and a trailing second of silence."""
    events = [e for _, e in feed_frames(ASRStream(config, *models), audio)]
    return sum(isinstance(e, Final) for e in events), sum(isinstance(e, Hold) for e in events)


def run() -> dict[str, float]:
    models = load_asr(HOLDING)
    aligner = WhisperModel(str(asset_path("base")), device="cpu", compute_type="int8")
    root = asset_path("testclips")
    cut = {"held": 0, "fixed": 0}
    pauses = whole_held = 0
    for name in CLIPS:
        clip = trim(read_clip(root / name))
        tail = silence(1.0)
        whole_held += _turns(HOLDING, models, np.concatenate([clip, tail]))[1] > 0
        # Some clips are two utterances already (cards/005); a cut adds a Final to those.
        finals_whole = _turns(FIXED, models, np.concatenate([clip, tail]))[0]
        for at in _boundaries(aligner, clip):
            audio = np.concatenate([clip[:at], silence(PAUSE_S), clip[at:], tail])
            pauses += 1
            cut["held"] += _turns(HOLDING, models, audio)[0] > finals_whole
            cut["fixed"] += _turns(FIXED, models, audio)[0] > finals_whole
    return {
        "turn_end.pauses": float(pauses),
        "turn_end.whole_turns": float(len(CLIPS)),
        "turn_end.whole_held": float(whole_held),
        "turn_end.cut_pct.fixed": round(100 * cut["fixed"] / pauses, 1),
        "turn_end.cut_pct.held": round(100 * cut["held"] / pauses, 1),
    }


def table(results: dict[str, float]) -> str:
    return "\n".join(
        [
            f"mid-sentence pauses of {PAUSE_S * 1000:.0f} ms, {results['turn_end.pauses']:.0f} "
            f"cuts of {results['turn_end.whole_turns']:.0f} real clips: turn cut in two",
            f"  fixed {ASRConfig().end_silence_ms} ms end of turn: "
            f"{results['turn_end.cut_pct.fixed']:.1f}%",
            f"  held to {ASRConfig().unfinished_end_silence_ms} ms after unfinished words: "
            f"{results['turn_end.cut_pct.held']:.1f}%",
            f"whole clips held (answered later): {results['turn_end.whole_held']:.0f} of "
            f"{results['turn_end.whole_turns']:.0f}",
        ]
    )


if __name__ == "__main__":
    print(table(run()))
