"""Turn-taking with eot-bench's definitions: of the pauses inside a turn, how many does a
detector end the turn on (false cut), and how long does it wait after the turn's true
end (mean wait, fallbacks included)?

Six sets, every turn streamed through a fresh `ASRStream` (Whisper base, the one-session
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
- phenomena (`phenomena_turns`): the same speaker's 49 short recordings of speech
  phenomena (fillers, breaths, laughter, cut-off and repeated words), each one turn
  with its own pauses and a true end;
- real_speech: the false cut over every pause of natural, lecture, unscripted and
  phenomena.

Detectors, in the same run: `vad` (silence alone, 300 ms), `rules` (silence, plus the
words' rule holding a pause to the fallback), `smart_turn` (Smart Turn's probability
alone through the same eagerness policy, nothing learned of the speaker), `learned`
(the default fusion, which does not run Smart Turn: `turn_audio_model = "none"`),
`learned_no_llm` (the same when the LLM gives no probability: the fusion fitted without
it), and `learned_no_habit` (without asr/pause_habit.py: a speaker who went on after a
committed end is not waited for longer). One speaker's turns are one session, as the
ASR hears them (`Turn.session`: the pieces of one recording, one side of the call), so
what a stream learns of a speaker carries to their next turn. The LLM's probability
comes from the native engine in this process, through the same probe the LLM stage
runs, and reaches the stream `HINT_DELAY_MS` after the SpeculativeEnd (bench/turn_sets.py:
the stage's measured first-token time, `e2e.llm_ttft_ms`).

Smart Turn's own cost, side by side in the same run: the shipped int8 graph against the
float-softmax edit the ASR loads (asr/turn_model.py), interleaved on the natural set's
pause windows, one thread each, while nothing else runs.

How a turn is streamed and the splice set is made: bench/turn_sets.py. The fusion is
refitted and policies replayed over the same sets by bench/turn_fit.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from bench.turn_sets import all_sets, stream_turn, text_prober
from tests.asr.clipdata import SAMPLE_RATE, T0_NS
from tests.asr.natural import Turn
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import EndScored, Final
from voxrelay.asr.models import ASRModels, load_asr
from voxrelay.asr.pause_habit import PauseHabit
from voxrelay.asr.stream import ASRStream
from voxrelay.asr.turn_end import WEIGHTS, Weights
from voxrelay.asr.turn_model import SmartTurn
from voxrelay.pipeline.models import asset_path

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
REAL_SPEECH = ("natural", "lecture", "unscripted", "phenomena")


@dataclass(slots=True)
class Outcome:
    pauses: int = 0
    cut: int = 0
    waits_ms: list[float] | None = None
    decision_ms: list[float] | None = None


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
    sets = all_sets(models)
    natural = sets["natural"]
    outcomes = evaluate(models, sets)
    results = {
        "turn_end.pauses.natural": float(sum(len(t.pauses) for t in natural)),
        "turn_end.turns.natural": float(len(natural)),
        "turn_end.pauses.splice": float(len(sets["splice"])),
        "turn_end.turns.requests": float(len(sets["requests"])),
        "turn_end.pauses.lecture": float(sum(len(t.pauses) for t in sets["lecture"])),
        "turn_end.pauses.unscripted": float(sum(len(t.pauses) for t in sets["unscripted"])),
        "turn_end.pauses.phenomena": float(sum(len(t.pauses) for t in sets["phenomena"])),
        "turn_end.turns.phenomena": float(len(sets["phenomena"])),
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
        f"one speaker's speech phenomena ({results['turn_end.pauses.phenomena']:.0f} pauses, "
        f"{results['turn_end.turns.phenomena']:.0f} turns), false cut % / mean wait ms: "
        + ", ".join(
            f"{d} {results[f'turn_end.false_cut_pct.phenomena{_suffix(d)}']:.1f} / "
            f"{results[f'turn_end.mean_wait_ms.phenomena{_suffix(d)}']:.0f}"
            for d in DETECTORS
        )
    )
    lines.append(
        f"every real mid-turn pause ({results['turn_end.pauses.real_speech']:.0f}: natural, "
        "lecture, unscripted, phenomena), false cut %: "
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


if __name__ == "__main__":
    print(table(run()))
