"""Turn-taking with eot-bench's definitions: of the pauses inside a turn, how many does a
detector end the turn on (false cut), and how long does it wait after the turn's true
end (mean wait, fallbacks included)?

Five sets, every turn streamed through a fresh `ASRStream` (Whisper base, the one-session
model; partials off: the end of turn reads the decode at the pause) with arrival times
at real-time pace, followed by 3 s of silence:
- natural (tests/asr/natural.py): real turns with their speakers' own pauses;
- splice: each of the 15 pocketsphinx clips cut at one word boundary (Whisper's word
  times, moved to the quietest 20 ms within 100 ms) and made a pause of 0.2-2.5 s
  (uniform, seeded; the boundary's own silence counted in it, the pause labelled by
  Silero as the natural set's are), one variant per boundary; as in the natural set,
  the end of a clip cut out of a continuous reading (LibriVox, "forever") is no true
  end: the reader goes on;
- requests (tests/asr/spoken_requests.py): 24 things users say to a voice agent
  (questions, requests, answers), synthetic, spoken by the bundled Piper voice: the
  wait after a whole question, which the other two sets barely hold;
- lecture (tests/asr/natural.py `lecture_turns`): one lecturer holding the floor for
  60 s, cut into pieces at pauses: every pause is mid-turn (false cut only, no wait);
- unscripted (`unscripted_turns`): three talks of ~25 s by one speaker, off the cuff,
  with "uh"s and "um"s, each one turn with a true end where he stops;
- real_speech: the false cut over every pause of natural, lecture and unscripted.

Detectors, in the same run: `vad` (silence alone, 300 ms), `rules` (silence, plus the
words' rule holding a pause to the fallback), `smart_turn` (Smart Turn's probability
alone through the same eagerness policy, nothing learned of the speaker), `learned`
(the default fusion, which does not run Smart Turn: `turn_audio_model = "none"`),
`learned_no_llm` (the same when the LLM gives no probability: the fusion fitted without
it), and `learned_no_habit` (without asr/pause_habit.py: a speaker who went on after a
committed end is not waited for longer). One speaker's turns are one session, as the
ASR hears them (`Turn.session`: the pieces of one recording, one side of the call), so
what a stream learns of a speaker carries to their next turn. The LLM's probability
comes from the native engine in this process, through the same probe the
LLM stage runs, and reaches the stream HINT_DELAY_MS after the SpeculativeEnd (the
stage's measured first-token time, `e2e.llm_ttft_ms`).

Smart Turn's own cost, side by side in the same run: the shipped int8 graph against the
float-softmax edit the ASR loads (asr/turn_model.py), interleaved on the natural set's
pause windows, one thread each, while nothing else runs.

`python -m bench.turn_end --fit` refits asr/turn_end.py's WEIGHTS on every set's pauses;
`--replay` lists the natural set's pauses, each scored on its own, and replays the
eagerness presets over every set (`replay`: a policy's trade-off in a second).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
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
    quietest_near,
    unscripted_turns,
    unvoiced_run,
    voiced_windows,
)
from tests.asr.spoken_requests import request_turns
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import EndScored, Final, Resume, SpeculativeEnd
from voxrelay.asr.models import ASRModels, load_asr
from voxrelay.asr.pause_habit import PauseHabit
from voxrelay.asr.stream import ASRStream
from voxrelay.asr.turn_end import (
    EAGERNESS,
    WEIGHTS,
    TurnSignals,
    Weights,
    end_probability,
    probe_text,
    unfinished,
    wait_ms,
)
from voxrelay.asr.turn_model import SmartTurn
from voxrelay.pipeline.models import asset_path

if TYPE_CHECKING:
    from voxrelay.llm.native_backend import NativeBackend
    from voxrelay.llm.sequence import TokenOutput

HINT_DELAY_MS = 40
FRAME_MS = 20
TAIL_S = 3.0
SEED = 7
PAUSE_S = (0.2, 2.5)  # eot-bench's mid-turn pause lengths, the spliced ones drawn from
BASE = ASRConfig(model="base", partial_interval_ms=0)
SMART_TURN = replace(BASE, turn_audio_model="smart-turn")
# (config, fusion weights, whether the words' rule holds a pause)
DETECTORS: dict[str, tuple[ASRConfig, Weights, bool]] = {
    "vad": (replace(BASE, turn_detection="silence", turn_fallback_ms=0), WEIGHTS, False),
    "rules": (replace(BASE, turn_detection="silence"), WEIGHTS, True),
    # Smart Turn's own probability alone: nothing learned of the speaker either.
    "smart_turn": (
        replace(SMART_TURN, turn_adapt_max_ms=0),
        Weights(1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        False,
    ),
    "learned": (BASE, WEIGHTS, True),
    # The learned end when the LLM gives no probability (a backend that does not probe,
    # a server without logprobs): the backend says so at once, and the fusion fitted
    # without the LLM's term decides (asr/turn_end.py WEIGHTS_NO_TEXT).
    "learned_no_llm": (BASE, WEIGHTS, True),
    # The learned end without what it learns of the speaker's own pauses in the session
    # (asr/pause_habit.py): each turn is decided as if it were the session's first.
    "learned_no_habit": (replace(BASE, turn_adapt_max_ms=0), WEIGHTS, True),
}
NO_LLM = frozenset({"learned_no_llm"})
# The sets of real speech with its speakers' own pauses (not spliced, not synthetic).
REAL_SPEECH = ("natural", "lecture", "unscripted")


@dataclass(slots=True)
class Outcome:
    pauses: int = 0
    cut: int = 0
    waits_ms: list[float] | None = None
    decision_ms: list[float] | None = None


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
        prompt = dialogue.prompt_text(backend, config, probe_text(text))
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


def evaluate(
    models: ASRModels, sets: dict[str, list[Turn]], detectors: tuple[str, ...] = tuple(DETECTORS)
) -> dict[str, dict[str, Outcome]]:
    llm_probe = text_prober()
    outcomes: dict[str, dict[str, Outcome]] = {}
    for detector in detectors:
        config, weights, rules = DETECTORS[detector]
        probe = _no_probability if detector in NO_LLM else llm_probe
        for set_name, turns in sets.items():
            outcome = Outcome(waits_ms=[], decision_ms=[])
            # One speaker's turns are one session: what a stream learns of their pauses
            # (asr/pause_habit.py) carries to the next.
            habits: dict[str, PauseHabit] = {}
            for turn in turns:
                habit = habits.setdefault(
                    turn.session or turn.name, PauseHabit(config.turn_adapt_max_ms)
                )
                stream = ASRStream(
                    config, models, weights=weights, hold_unfinished=rules, habit=habit
                )
                events = stream_turn(stream, turn.audio, probe)
                _score_turn(outcome, turn, events, T0_NS + _ns(turn.speech_end))
            outcomes.setdefault(detector, {})[set_name] = outcome
    return outcomes


def _no_probability(text: str) -> float | None:
    return None


def run() -> dict[str, float]:
    models = load_asr(ASRConfig(model="auto", turn_audio_model="smart-turn"))
    natural = natural_turns(asset_path("naturalclips"), asset_path("testclips"), models.vad)
    sets = {
        "natural": natural,
        "splice": splice_turns(models.whisper["base"], models),
        "requests": request_turns(models.vad),
        "lecture": lecture_turns(asset_path("naturalclips"), models.vad),
        "unscripted": unscripted_turns(asset_path("naturalclips"), models.vad),
    }
    outcomes = evaluate(models, sets)
    results = {
        "turn_end.pauses.natural": float(sum(len(t.pauses) for t in natural)),
        "turn_end.turns.natural": float(len(natural)),
        "turn_end.pauses.splice": float(len(sets["splice"])),
        "turn_end.turns.requests": float(len(sets["requests"])),
        "turn_end.pauses.lecture": float(sum(len(t.pauses) for t in sets["lecture"])),
        "turn_end.pauses.unscripted": float(sum(len(t.pauses) for t in sets["unscripted"])),
        "turn_end.pauses.real_speech": float(
            sum(outcomes["learned"][name].pauses for name in REAL_SPEECH)
        ),
    }
    for detector, by_set in outcomes.items():
        suffix = "" if detector == "learned" else f".{detector}"
        for set_name, outcome in by_set.items():
            assert outcome.waits_ms is not None and outcome.decision_ms is not None
            key = f"{set_name}{suffix}"
            cut_pct = 100 * outcome.cut / max(outcome.pauses, 1)
            results[f"turn_end.false_cut_pct.{key}"] = round(cut_pct, 1)
            if not outcome.waits_ms:  # the lecture has no true end to wait after
                continue
            results[f"turn_end.mean_wait_ms.{key}"] = round(float(np.mean(outcome.waits_ms)), 1)
            results[f"turn_end.p50_wait_ms.{key}"] = round(float(np.median(outcome.waits_ms)), 1)
        # Every real mid-turn pause the sets hold, pooled: a pause moves it least.
        real = [by_set[name] for name in REAL_SPEECH]
        cut_pct = 100 * sum(o.cut for o in real) / max(sum(o.pauses for o in real), 1)
        results[f"turn_end.false_cut_pct.real_speech{suffix}"] = round(cut_pct, 1)
    decisions = outcomes["learned"]["natural"].decision_ms or [0.0]
    results["turn_end.decision_ms.p50"] = round(float(np.percentile(decisions, 50)), 1)
    results["turn_end.decision_ms.p95"] = round(float(np.percentile(decisions, 95)), 1)
    results.update(smart_turn_cost(natural))
    return results


def smart_turn_cost(turns: list[Turn], rounds: int = 3) -> dict[str, float]:
    """Smart Turn's inference (features included) at every pause of `turns`, 200 ms in:
    the shipped graph and the float-softmax edit, interleaved call by call."""
    path = asset_path("smart-turn") / "model.onnx"
    graphs = {"shipped": SmartTurn(path, fast_softmax=False), "float_softmax": SmartTurn(path)}
    after = SAMPLE_RATE // 5
    windows = [turn.audio[: first + after] for turn in turns for first, _ in turn.pauses]
    windows += [turn.audio[: turn.speech_end + after] for turn in turns if turn.true_end]
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for model in graphs.values():
        model.score(windows[0])  # ORT's first run allocates
    for _ in range(rounds):
        for window in windows:
            for name, model in graphs.items():
                times[name].append(model.score(window).compute_ms)
    shipped, fast = (float(np.median(times[name])) for name in graphs)
    return {
        "turn_end.smart_turn_ms.p50.shipped": round(shipped, 1),
        "turn_end.smart_turn_ms.p50.float_softmax": round(fast, 1),
        "turn_end.smart_turn_shipped_over_float_softmax": round(shipped / fast, 2),
    }


def _suffix(detector: str) -> str:
    return "" if detector == "learned" else f".{detector}"


def table(results: dict[str, float]) -> str:
    lines = [
        f"turn-taking (eot-bench): {results['turn_end.pauses.natural']:.0f} natural mid-turn "
        f"pauses in {results['turn_end.turns.natural']:.0f} real turns; "
        f"{results['turn_end.pauses.splice']:.0f} spliced pauses of 0.2-2.5 s",
        f"{'detector':14} {'false cut nat %':>15} {'wait nat ms':>12} "
        f"{'false cut splice %':>18} {'wait splice ms':>15} {'wait requests ms':>17}",
    ]
    for detector in DETECTORS:
        suffix = "" if detector == "learned" else f".{detector}"
        lines.append(
            f"{detector:14} {results[f'turn_end.false_cut_pct.natural{suffix}']:>15.1f} "
            f"{results[f'turn_end.mean_wait_ms.natural{suffix}']:>12.0f} "
            f"{results[f'turn_end.false_cut_pct.splice{suffix}']:>18.1f} "
            f"{results[f'turn_end.mean_wait_ms.splice{suffix}']:>15.0f} "
            f"{results[f'turn_end.mean_wait_ms.requests{suffix}']:>17.0f}"
        )
    lines.append(
        f"one lecturer holding the floor ({results['turn_end.pauses.lecture']:.0f} pauses), "
        "false cut %: "
        + ", ".join(
            f"{d} {results[f'turn_end.false_cut_pct.lecture{_suffix(d)}']:.1f}" for d in DETECTORS
        )
    )
    lines.append(
        f"one speaker talking unscripted ({results['turn_end.pauses.unscripted']:.0f} pauses), "
        "false cut %: "
        + ", ".join(
            f"{d} {results[f'turn_end.false_cut_pct.unscripted{_suffix(d)}']:.1f}"
            for d in DETECTORS
        )
    )
    lines.append(
        f"every real mid-turn pause ({results['turn_end.pauses.real_speech']:.0f}: natural, "
        "lecture, unscripted), false cut %: "
        + ", ".join(
            f"{d} {results[f'turn_end.false_cut_pct.real_speech{_suffix(d)}']:.1f}"
            for d in DETECTORS
        )
    )
    lines.append(
        f"decision cost p50 {results['turn_end.decision_ms.p50']:.1f} ms, "
        f"p95 {results['turn_end.decision_ms.p95']:.1f} ms (the fusion, in the ASR)"
    )
    lines.append(
        f"Smart Turn alone, p50: shipped int8 graph "
        f"{results['turn_end.smart_turn_ms.p50.shipped']:.1f} ms, float softmax "
        f"{results['turn_end.smart_turn_ms.p50.float_softmax']:.1f} ms "
        f"({results['turn_end.smart_turn_shipped_over_float_softmax']:.2f}x)"
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


@dataclass(frozen=True, slots=True)
class ScoredPause:
    """One pause scored on its own (the stream never ended it; see `scored_pauses`)."""

    turn: str
    set_name: str
    signals: TurnSignals
    is_end: bool  # the turn's true end, else a mid-turn pause
    decided_ms: float  # when the decision came, after the speech end
    resumed_ms: float | None  # when the speaker went on, after the speech end (None: an end)


def scored_pauses() -> list[ScoredPause]:
    """Every pause of every set, each scored on its own: the stream never ends a pause
    before the speaker resumes (the decision always waits, the words' rule does not
    hold), so no cut changes what the next pause hears. The last pause of a turn
    without a true end is left out."""
    models = load_asr(ASRConfig(model="auto", turn_audio_model="smart-turn"))
    natural = natural_turns(asset_path("naturalclips"), asset_path("testclips"), models.vad)
    sets = [("natural", turn) for turn in natural]
    sets += [("splice", turn) for turn in splice_turns(models.whisper["base"], models)]
    sets += [("requests", turn) for turn in request_turns(models.vad)]
    sets += [("lecture", turn) for turn in lecture_turns(asset_path("naturalclips"), models.vad)]
    unscripted = unscripted_turns(asset_path("naturalclips"), models.vad)
    sets += [("unscripted", turn) for turn in unscripted]
    probe = text_prober()
    never = Weights(0.0, 0.0, 0.0, 0.0, 0.0, -50.0)
    config = replace(SMART_TURN, turn_detection="learned", turn_fallback_ms=10_000)
    pauses: list[ScoredPause] = []
    for set_name, turn in sets:
        stream = ASRStream(config, models, weights=never, hold_unfinished=False)
        found: list[tuple[TurnSignals, int, int]] = []  # (signals, speech end, decided)
        resumed: dict[int, int] = {}  # index in found -> when the speaker went on (ns)
        text, speech_end_ns = "", 0
        for at, event in stream_turn(stream, turn.audio, probe):
            if isinstance(event, SpeculativeEnd):  # each EndScored decides the pause of it
                text, speech_end_ns = event.text, event.speech_end_ns
            elif isinstance(event, EndScored):
                found.append(
                    (
                        TurnSignals(text, event.audio_prob, event.text_prob, event.closing_prob),
                        speech_end_ns,
                        at,
                    )
                )
            elif isinstance(event, Resume) and found:
                resumed.setdefault(len(found) - 1, at)
        for index, (signals, end_ns, decided_ns) in enumerate(found):
            last = index == len(found) - 1
            if last and not turn.true_end:
                continue
            resumed_ms = None if last or index not in resumed else (resumed[index] - end_ns) / 1e6
            pauses.append(
                ScoredPause(
                    turn.name, set_name, signals, last, (decided_ns - end_ns) / 1e6, resumed_ms
                )
            )
    return pauses


def fit(pauses: list[ScoredPause], audio: bool = True) -> Weights:
    """Refit the fusion on every scored pause (class-balanced, L2 0.3); `audio`: with
    Smart Turn's term (else its weight is 0). A pause is an end when it is a true end
    (the last of a turn that has one)."""
    features = np.array([[*pause.signals.features(), 1.0] for pause in pauses])
    if not audio:
        features[:, 0] = 0.0
    labels = np.array([float(pause.is_end) for pause in pauses])
    weights = fit_logistic(features, labels, 0.3 * np.eye(features.shape[1]), steps=100)
    print(f"{len(pauses)} pauses, {int(labels.sum())} true ends")
    return Weights(*(round(float(w), 2) for w in weights))


def replay(
    pauses: list[ScoredPause],
    eagerness: str = "medium",
    fallback_ms: int = 2500,
    weights: Weights = WEIGHTS,
) -> dict[str, tuple[float, float]]:
    """The learned detector's false cut (%) and mean wait (ms) per set, replayed over
    scored pauses: a pause ends once the silence reaches the larger of its wait and its
    decision time (the words' rule holds an unfinished one to the fallback). It misses
    only what a cut does to the pauses after it (the words after a cut are decoded
    alone), so it runs a policy over every pause in a second, within 1-3 points of
    `run` (docs/asr.md, "Session 14")."""
    out: dict[str, tuple[float, float]] = {}
    for set_name in sorted({pause.set_name for pause in pauses}):
        cuts, mids, waits = 0, 0, []
        for pause in (p for p in pauses if p.set_name == set_name):
            prob = end_probability(pause.signals, weights)
            wait = wait_ms(prob, eagerness, fallback_ms)
            if unfinished(pause.signals.text):
                wait = fallback_ms
            ends_at = max(wait, pause.decided_ms)
            if pause.is_end:
                waits.append(ends_at)
            elif pause.resumed_ms is not None:
                mids += 1
                cuts += ends_at < pause.resumed_ms
        out[set_name] = (100 * cuts / max(mids, 1), float(np.mean(waits)) if waits else 0.0)
    return out


def _replay_report(pauses: list[ScoredPause]) -> str:
    lines = [f"{'pause':28} {'end':>3} {'text P':>8} {'audio P':>7} {'close P':>7} "
             f"{'fused':>5} {'decided':>7} {'resumed':>7}  text"]  # fmt: skip
    for pause in pauses:
        if pause.set_name != "natural":
            continue
        signals = pause.signals
        lines.append(
            f"{pause.turn:28} {'yes' if pause.is_end else '':>3} "
            f"{signals.text_prob or 0:>8.1e} {signals.audio_prob or 0:>7.2f} "
            f"{signals.closing_prob or 0:>7.2f} {end_probability(signals):>5.2f} "
            f"{pause.decided_ms:>7.0f} {pause.resumed_ms or 0:>7.0f}  {signals.text[-50:]}"
        )
    for eagerness in EAGERNESS:
        by_set = replay(pauses, eagerness)
        lines.append(
            f"{eagerness:6} "
            + "  ".join(
                f"{name} {cut:.1f}% / {wait:.0f} ms" for name, (cut, wait) in by_set.items()
            )
        )
    return "\n".join(lines)


if __name__ == "__main__":
    if "--fit" in sys.argv:
        scored = scored_pauses()
        print("with Smart Turn (WEIGHTS_SMART_TURN):", fit(scored))
        print("without (WEIGHTS):", fit(scored, audio=False))
    elif "--replay" in sys.argv:
        print(_replay_report(scored_pauses()))
    else:
        print(table(run()))
