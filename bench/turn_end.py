"""Turn-taking with eot-bench's definitions: of the pauses inside a turn, how many does a
detector end the turn on (false cut), and how long does it wait after the turn's true
end (mean wait, fallbacks included)?

Two sets, every turn streamed through a fresh `ASRStream` (Whisper base, the one-session
model; partials off: the end of turn reads the decode at the pause) with arrival times
at real-time pace, followed by 3 s of silence:
- natural (tests/asr/natural.py): real turns with their speakers' own pauses;
- splice: each of the 15 pocketsphinx clips cut at one word boundary (Whisper's word
  times, moved to the quietest 20 ms within 100 ms) with a pause of 0.2-2.5 s (uniform,
  seeded) put in, one variant per boundary.

Detectors, in the same run: `vad` (silence alone, 300 ms), `rules` (silence, plus the
words' rule holding a pause to the fallback), `smart_turn` (Smart Turn's probability
alone through the same eagerness policy), and `learned` (the default fusion). The LLM's
probability comes from the native engine in this process, through the same probe the
LLM stage runs, and reaches the stream HINT_DELAY_MS after the SpeculativeEnd (the
stage's measured first-token time, `e2e.llm_ttft_ms`).

`python -m bench.turn_end --fit` refits asr/turn_end.py's WEIGHTS on both sets.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from faster_whisper import WhisperModel

from tests.asr.clipdata import SAMPLE_RATE, T0_NS, read_clip, silence, trim
from tests.asr.natural import POCKETSPHINX, Turn, natural_turns
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import EndScored, Final, SpeculativeEnd
from voxrelay.asr.models import ASRModels, load_asr
from voxrelay.asr.stream import ASRStream
from voxrelay.asr.turn_end import WEIGHTS, TurnSignals, Weights, probe_text
from voxrelay.pipeline.models import asset_path

HINT_DELAY_MS = 40
FRAME_MS = 20
TAIL_S = 3.0
SEED = 7
SEARCH = SAMPLE_RATE // 10
FRAME = SAMPLE_RATE // 50
BASE = ASRConfig(model="base", partial_interval_ms=0)
# (config, fusion weights, whether the words' rule holds a pause)
DETECTORS: dict[str, tuple[ASRConfig, Weights, bool]] = {
    "vad": (replace(BASE, turn_detection="silence", turn_fallback_ms=0), WEIGHTS, False),
    "rules": (replace(BASE, turn_detection="silence"), WEIGHTS, True),
    "smart_turn": (BASE, Weights(1.0, 0.0, 0.0, 0.0, 0.0, 0.0), False),
    "learned": (BASE, WEIGHTS, True),
}


@dataclass(slots=True)
class Outcome:
    pauses: int = 0
    cut: int = 0
    waits_ms: list[float] | None = None
    decision_ms: list[float] | None = None


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
        backend.submit(request_id, dialogue.prompt_text(backend, config, probe_text(text)))
        outputs = []
        while not outputs:
            outputs = backend.step()
        backend.abort(request_id)
        return outputs[0].probe_prob

    return probe


def stream_turn(
    stream: ASRStream, audio: np.ndarray, probe: Callable[[str], float | None]
) -> list[tuple[int, object]]:
    """Feed `audio` then TAIL_S of silence as 20 ms frames; each SpeculativeEnd's text
    probability reaches the stream HINT_DELAY_MS later. (arrival_ns, event) pairs."""
    audio = np.concatenate([audio, silence(TAIL_S)])
    frame = SAMPLE_RATE * FRAME_MS // 1000
    hints: list[tuple[int, int, float]] = []  # (due frame, utterance, probability)
    events: list[tuple[int, object]] = []
    for index, offset in enumerate(range(0, audio.size, frame)):
        arrival_ns = T0_NS + (offset + frame) * 1_000_000_000 // SAMPLE_RATE
        new = stream.feed(audio[offset : offset + frame], SAMPLE_RATE, 1, arrival_ns)
        for due, utterance, prob in [h for h in hints if h[0] <= index]:
            hints.remove((due, utterance, prob))
            new += stream.hint(utterance, prob)
        for event in new:
            if isinstance(event, SpeculativeEnd):
                prob = probe(event.text)
                if prob is not None:
                    hints.append((index + HINT_DELAY_MS // FRAME_MS, event.utterance_id, prob))
        events += [(arrival_ns, event) for event in new]
    events += [(arrival_ns, event) for event in stream.flush(arrival_ns)]
    return events


def _score_turn(
    outcome: Outcome, turn: Turn, events: list[tuple[int, object]], speech_end_ns: int
) -> None:
    """Count the turn's pauses ended on and its wait at the true end."""
    assert outcome.waits_ms is not None and outcome.decision_ms is not None
    finals = [(at, e) for at, e in events if isinstance(e, Final)]
    ends = [e.speech_end_ns for _, e in finals]
    outcome.pauses += len(turn.pauses)
    for first, last in turn.pauses:
        start_ns, stop_ns = T0_NS + _ns(first), T0_NS + _ns(last)
        outcome.cut += any(start_ns - 100_000_000 <= end < stop_ns for end in ends)
    if finals and turn.true_end:  # a turn Whisper heard no words in has no end to time
        last_at, last_final = finals[-1]
        outcome.waits_ms.append((last_at - max(last_final.speech_end_ns, speech_end_ns)) / 1e6)
    outcome.decision_ms += [e.decision_ms for _, e in events if isinstance(e, EndScored)]


def _ns(sample: int) -> int:
    return sample * 1_000_000_000 // SAMPLE_RATE


def _quietest_near(audio: np.ndarray, at: int) -> int:
    starts = range(max(at - SEARCH, 0), min(at + SEARCH, audio.size - FRAME), FRAME // 2)
    energy = [float(np.mean(audio[start : start + FRAME] ** 2)) for start in starts]
    return starts[int(np.argmin(energy))] + FRAME // 2


def splice_turns(aligner: WhisperModel, models: ASRModels) -> list[Turn]:
    rng = np.random.default_rng(SEED)
    root = asset_path("testclips")
    turns = []
    for name in POCKETSPHINX:
        clip = trim(read_clip(root / name))
        segments, _ = aligner.transcribe(clip, language="en", word_timestamps=True)
        words = [word for segment in segments for word in segment.words]
        for word in words[:-1]:
            at = _quietest_near(clip, int(word.end * SAMPLE_RATE))
            pause = int(rng.uniform(0.2, 2.5) * SAMPLE_RATE)
            audio = np.concatenate([clip[:at], silence(pause / SAMPLE_RATE), clip[at:]])
            end = audio.size - int(0.1 * SAMPLE_RATE)  # trim's margin after the words
            turns.append(Turn(f"{name}@{at}", audio, ((at, at + pause),), end))
    return turns


def evaluate(
    models: ASRModels, sets: dict[str, list[Turn]], detectors: tuple[str, ...] = tuple(DETECTORS)
) -> dict[str, dict[str, Outcome]]:
    probe = text_prober()
    outcomes: dict[str, dict[str, Outcome]] = {}
    for detector in detectors:
        config, weights, rules = DETECTORS[detector]
        for set_name, turns in sets.items():
            outcome = Outcome(waits_ms=[], decision_ms=[])
            for turn in turns:
                stream = ASRStream(config, models, weights=weights, hold_unfinished=rules)
                events = stream_turn(stream, turn.audio, probe)
                _score_turn(outcome, turn, events, T0_NS + _ns(turn.speech_end))
            outcomes.setdefault(detector, {})[set_name] = outcome
    return outcomes


def run() -> dict[str, float]:
    models = load_asr(ASRConfig(model="auto"))
    natural = natural_turns(asset_path("naturalclips"), asset_path("testclips"), models.vad)
    sets = {"natural": natural, "splice": splice_turns(models.whisper["base"], models)}
    outcomes = evaluate(models, sets)
    results = {
        "turn_end.pauses.natural": float(sum(len(t.pauses) for t in natural)),
        "turn_end.turns.natural": float(len(natural)),
        "turn_end.pauses.splice": float(len(sets["splice"])),
    }
    for detector, by_set in outcomes.items():
        suffix = "" if detector == "learned" else f".{detector}"
        for set_name, outcome in by_set.items():
            assert outcome.waits_ms is not None and outcome.decision_ms is not None
            key = f"{set_name}{suffix}"
            results[f"turn_end.false_cut_pct.{key}"] = round(100 * outcome.cut / outcome.pauses, 1)
            results[f"turn_end.mean_wait_ms.{key}"] = round(float(np.mean(outcome.waits_ms)), 1)
            results[f"turn_end.p50_wait_ms.{key}"] = round(float(np.median(outcome.waits_ms)), 1)
    decisions = outcomes["learned"]["natural"].decision_ms or [0.0]
    results["turn_end.decision_ms.p50"] = round(float(np.percentile(decisions, 50)), 1)
    results["turn_end.decision_ms.p95"] = round(float(np.percentile(decisions, 95)), 1)
    return results


def table(results: dict[str, float]) -> str:
    lines = [
        f"turn-taking (eot-bench): {results['turn_end.pauses.natural']:.0f} natural mid-turn "
        f"pauses in {results['turn_end.turns.natural']:.0f} real turns; "
        f"{results['turn_end.pauses.splice']:.0f} spliced pauses of 0.2-2.5 s",
        f"{'detector':11} {'false cut nat %':>15} {'wait nat ms':>12} "
        f"{'false cut splice %':>18} {'wait splice ms':>15}",
    ]
    for detector in DETECTORS:
        suffix = "" if detector == "learned" else f".{detector}"
        lines.append(
            f"{detector:11} {results[f'turn_end.false_cut_pct.natural{suffix}']:>15.1f} "
            f"{results[f'turn_end.mean_wait_ms.natural{suffix}']:>12.0f} "
            f"{results[f'turn_end.false_cut_pct.splice{suffix}']:>18.1f} "
            f"{results[f'turn_end.mean_wait_ms.splice{suffix}']:>15.0f}"
        )
    lines.append(
        f"decision cost p50 {results['turn_end.decision_ms.p50']:.1f} ms, "
        f"p95 {results['turn_end.decision_ms.p95']:.1f} ms (Smart Turn + fusion, in the ASR)"
    )
    return "\n".join(lines)


def fit_logistic(
    design: np.ndarray, labels: np.ndarray, penalty: np.ndarray, steps: int, tol: float = 0.0
) -> np.ndarray:
    """Class-balanced logistic regression by Newton steps: weights (F,) of `design`
    (N, F; a bias column included) with the L2 `penalty` (F, F). Stops early once no
    weight moves more than `tol`."""
    balance = np.where(labels == 1, (labels == 0).sum() / max(labels.sum(), 1), 1.0)
    weights = np.zeros(design.shape[1])
    for _ in range(steps):
        prob = 1 / (1 + np.exp(-np.clip(design @ weights, -60, 60)))
        grad = design.T @ (balance * (prob - labels)) + penalty @ weights
        hess = design.T @ (design * (balance * prob * (1 - prob))[:, None]) + penalty
        step = np.linalg.solve(hess, grad)
        weights -= step
        if np.abs(step).max() < tol:
            break
    return weights


def fit() -> Weights:
    """Refit the fusion on every pause of both sets, each scored on its own: the stream
    never ends a pause before the speaker resumes (the decision always waits, the words'
    rule does not hold), so no cut changes what the next pause hears. A pause is an end
    when it is a true end (the last of a turn that has one); the last pause of a turn
    without one is left out."""
    models = load_asr(ASRConfig(model="auto"))
    natural = natural_turns(asset_path("naturalclips"), asset_path("testclips"), models.vad)
    turns = natural + splice_turns(models.whisper["base"], models)
    probe = text_prober()
    never = Weights(0.0, 0.0, 0.0, 0.0, 0.0, -50.0)
    config = replace(BASE, turn_fallback_ms=10_000)
    rows: list[tuple[tuple[float, ...], bool]] = []
    for turn in turns:
        stream = ASRStream(
            config, models, weights=never, hold_unfinished=False, always_score_audio=True
        )
        events = stream_turn(stream, turn.audio, probe)
        scored: list[TurnSignals] = []
        text = ""
        for _, event in events:  # each EndScored decides the pause of the SpeculativeEnd before
            if isinstance(event, SpeculativeEnd):
                text = event.text
            elif isinstance(event, EndScored):
                scored.append(TurnSignals(text, event.audio_prob, event.text_prob))
        for index, signals in enumerate(scored):
            last = index == len(scored) - 1
            if not last or turn.true_end:
                rows.append((signals.features(), last))
    features = np.array([[*row, 1.0] for row, _ in rows])
    labels = np.array([float(is_end) for _, is_end in rows])
    weights = fit_logistic(features, labels, 0.3 * np.eye(features.shape[1]), steps=100)
    print(f"{len(rows)} pauses, {int(labels.sum())} true ends")
    return Weights(*(round(float(w), 2) for w in weights))


if __name__ == "__main__":
    print(fit() if "--fit" in sys.argv else table(run()))
