"""An end-of-turn head on the LLM's own hidden state: P(the user's turn is over).

The model's P(<|im_end|>) after the user's words is a weak signal (SmolLM2-135M was
never taught where spoken turns end: many whole answers score 1e-6). LiveKit's turn
detector fine-tunes the same model for it; this head is the cheap half of that idea: one
logistic regression on the final hidden state (the lm_head's input) at the last user
token, read from the prefill the speculative reply runs anyway, so it costs one dot
product. `python -m bench.turn_head` trains it on text from registry packages
(chatterbot-corpus conversations, State of the Union speeches): each turn whole is an
end, the same turn cut at a word boundary is not (docs/llm.md, "End-of-turn head").

Off by default (`LLMConfig.turn_head_path`): on the natural-pause set it did not beat
the model's own P(<|im_end|>) (docs/llm.md has the numbers). The head belongs to one
model: it carries the model's name and sizes, and loading it for another is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class TurnHead:
    weight: torch.Tensor  # (D,) float32, the hidden state's standardisation folded in
    bias: float
    model_name: str
    hidden_size: int
    vocab_size: int

    def probabilities(self, hidden: torch.Tensor) -> list[float]:
        """(P, D) final hidden states -> P(end of turn) of each row."""
        return torch.sigmoid(hidden.float() @ self.weight + self.bias).tolist()

    def save(self, path: Path) -> None:
        np.savez(
            path,
            weight=self.weight.numpy().astype(np.float32),
            bias=np.float32(self.bias),
            model_name=np.str_(self.model_name),
            sizes=np.array([self.hidden_size, self.vocab_size], dtype=np.int64),
        )


def load_head(path: Path, model_name: str, hidden_size: int, vocab_size: int) -> TurnHead:
    """The head in `path`; ValueError when it is missing or was trained on another model."""
    if not path.is_file():
        raise ValueError(f"turn_head_path {path} not found; `python -m bench.turn_head` writes it")
    with np.load(path) as data:
        trained_on = (str(data["model_name"]), *(int(size) for size in data["sizes"]))
        if trained_on != (model_name, hidden_size, vocab_size):
            raise ValueError(
                f"the end-of-turn head {path} was trained on {trained_on}, not on this model "
                f"{(model_name, hidden_size, vocab_size)}; retrain it (python -m bench.turn_head)"
            )
        weight = torch.from_numpy(data["weight"].astype(np.float32))
        return TurnHead(weight, float(data["bias"]), model_name, hidden_size, vocab_size)
