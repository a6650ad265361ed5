"""The fusion's weights refitted, and eagerness policies replayed, over every pause of
`bench.turn_end`'s sets, each scored on its own.

`python -m bench.turn_fit --fit` refits asr/turn_end.py's WEIGHTS on every set's pauses;
`--replay` lists the natural set's pauses, each scored on its own, and replays the
eagerness presets over every set (`replay`: a policy's trade-off in a second).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np

from bench.turn_end import SMART_TURN
from bench.turn_sets import all_sets, stream_turn, text_prober
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import EndScored, Resume, SpeculativeEnd
from voxrelay.asr.models import load_asr
from voxrelay.asr.stream import ASRStream
from voxrelay.asr.turn_end import (
    EAGERNESS,
    WEIGHTS,
    TurnSignals,
    Weights,
    end_probability,
    unfinished,
    wait_ms,
)


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
    sets = [(name, turn) for name, turns in all_sets(models).items() for turn in turns]
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
    else:
        print(_replay_report(scored_pauses()))
