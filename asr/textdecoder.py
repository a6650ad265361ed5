"""Whisper's text decoder in PyTorch, fed the CTranslate2 encoder's output.

Why not CTranslate2's `generate`: the stream re-decodes a growing utterance, and each
decode mostly repeats the text the last one found; `generate` pays a step (~8 ms here)
for every token of it. Here the last decode's text is a draft: the prompt and the draft
go through the decoder in one batched pass, the vocabulary projection runs only on the
rows it needs, and the greedy choice at each row is checked against the draft. Steps
start only where the guess fails (new words, a revised one), so the end-of-turn decode
steps through the last word or two instead of the whole utterance (docs/asr.md,
"Native text decoder"). The text is greedy decoding's, draft or not, up to int8
rounding (see `TextDecoder.decode`).

Weights come from the same `model.bin` CTranslate2 loads (float16 there), in int8 with
one scale per output row: memory bandwidth is this box's bottleneck (the float32
vocabulary projection alone took 13 ms a step). Kernels per shape, chosen by measurement
(docs/asr.md; the layers are asr/ct2_layers.py): `_weight_int8pack_mm` (bfloat16
activations) for single-token steps, fbgemm's dynamic int8 GEMM for the batched pass and
the vocabulary projection, float32 for the cross-attention keys/values of the encoder
frames (int8 there cost accuracy).

Each decode also reports where Whisper would take the sentence after its last word
(`TextDecode.closing_prob`): the share of a closing mark or the end of text against a
trailing one (",", "...", "-"), read from the logits of the step that ended the word, so
at no extra cost. Whisper hears the voice: a falling, finished phrase gets ".", a breath
mid-sentence ",". It tells a turn's end from a mid-turn pause better than the words
alone (docs/asr.md, "Session 17").
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from voxrelay.asr.ct2_layers import (
    DenseLinear,
    Int8Linear,
    LayerNorm,
    VocabProjection,
    read_ct2_model,
)

MAX_POSITIONS = 448  # Whisper's text context


@dataclass(frozen=True, slots=True)
class _Layer:
    self_norm: LayerNorm
    qkv: Int8Linear  # fused (3d, d); Whisper's key projection has no bias (stored as zeros)
    self_out: Int8Linear
    cross_norm: LayerNorm
    cross_query: Int8Linear
    cross_out: Int8Linear
    ffn_norm: LayerNorm
    ffn_in: Int8Linear
    ffn_out: Int8Linear


# Tokens guessed ahead per check after a failed guess, and the longest run of recent
# tokens looked up in the draft to place it (3, 2, then 1 token).
_MAX_GUESS = 16
_LOOKUP_TOKENS = 3


def _continuation(tokens: list[int], draft: list[int], floor: int) -> tuple[list[int], int]:
    """What follows the end of `tokens` in `draft`, and the new floor: the first match
    of their last 3, 2 or 1 tokens (longest first) that ends at or after `floor`;
    ([], floor) when none."""
    for size in range(min(_LOOKUP_TOKENS, len(tokens)), 0, -1):
        tail = tokens[-size:]
        for index in range(max(0, floor - size), len(draft) - size):
            if draft[index : index + size] == tail:
                return draft[index + size :], index + size
    return [], floor


@dataclass(frozen=True, slots=True)
class Marks:
    """Token ids of the marks that close a sentence and of those that trail on."""

    closing: tuple[int, ...]  # ".", "?", "!"
    trailing: tuple[int, ...]  # ",", "...", "-", ";"


@dataclass(frozen=True, slots=True)
class TextDecode:
    tokens: list[int]  # without EOT
    accepted: int  # tokens the draft guessed right (each saved a decoder step)
    sum_logprob: float  # over the generated tokens and the EOT
    no_speech_prob: float  # at the start-of-transcript position
    # After the last word: P(closing mark or EOT) / P(closing, trailing mark or EOT);
    # None without marks, or when the decode stopped at its budget.
    closing_prob: float | None = None


def _closing_share(logprobs: torch.Tensor, marks: Marks, eot: int) -> float:
    closing = float(logprobs[[*marks.closing, eot]].exp().sum())
    trailing = float(logprobs[list(marks.trailing)].exp().sum())
    return closing / max(closing + trailing, 1e-12)


class TextDecoder:
    """Greedy decoding checked against a draft; one instance per model, shared by streams."""

    def __init__(self, model_dir: Path) -> None:
        variables = read_ct2_model(model_dir / "model.bin")
        config = json.loads((model_dir / "config.json").read_text())
        embeddings = variables["decoder/embeddings/weight"]  # (vocab, d) float16
        self._embeddings = torch.from_numpy(embeddings.copy())
        # The output projection is the embedding matrix, applied only to the rows read.
        self._head = VocabProjection.from_ct2(embeddings)
        self._positions = torch.from_numpy(
            variables["decoder/position_encodings/encodings"].astype(np.float32)
        )  # (448, d)
        self._heads = int(variables["decoder/num_heads"])
        self._width = self._embeddings.shape[1]
        head_width = self._width // self._heads
        # Softmax scale 1/sqrt(D) folded into the query rows (exact under per-row scales).
        query_scale = np.ones(3 * self._width, np.float32)
        query_scale[: self._width] = head_width**-0.5
        self._layers = []
        index = 0
        while f"decoder/layer_{index}/ffn/linear_0/weight" in variables:
            prefix = f"decoder/layer_{index}"

            def linear(
                name: str, scale: float | np.ndarray = 1.0, prefix: str = prefix
            ) -> Int8Linear:
                weight, bias = (variables[f"{prefix}/{name}/{part}"] for part in ("weight", "bias"))
                scale = np.asarray(scale, np.float32).reshape(-1)
                return Int8Linear.from_ct2(weight * scale[:, None], bias * scale)

            def norm(name: str, prefix: str = prefix) -> LayerNorm:
                return LayerNorm.from_ct2(variables, f"{prefix}/{name}/layer_norm")

            self._layers.append(
                _Layer(
                    norm("self_attention"),
                    linear("self_attention/linear_0", query_scale),
                    linear("self_attention/linear_1"),
                    norm("attention"),
                    linear("attention/linear_0", head_width**-0.5),
                    linear("attention/linear_2"),
                    norm("ffn"),
                    linear("ffn/linear_0"),
                    linear("ffn/linear_1"),
                )
            )
            index += 1
        # Every layer's cross-attention keys and values: one (layers x 2d, d) GEMM over
        # the encoder frames per decode.
        cross = [f"decoder/layer_{i}/attention/linear_1" for i in range(index)]
        self._cross_kv = DenseLinear.from_ct2(
            np.concatenate([variables[f"{name}/weight"] for name in cross]),
            np.concatenate([variables[f"{name}/bias"] for name in cross]),
        )
        self._final_norm = LayerNorm.from_ct2(variables, "decoder/layer_norm")
        self._suppress = torch.tensor(config["suppress_ids"])
        self._suppress_begin = torch.tensor(config["suppress_ids_begin"])
        # (layers, 2, H, positions, D): keys and values of the text so far, written in place.
        self._cache = torch.zeros(len(self._layers), 2, self._heads, MAX_POSITIONS, head_width)
        self._lock = threading.Lock()  # the cache is this instance's: one decode at a time

    @torch.inference_mode()
    def decode(
        self,
        encoded: torch.Tensor,
        prompt: list[int],
        draft: list[int],
        max_tokens: int,
        eot: int,
        no_speech: int,
        marks: Marks | None = None,
    ) -> TextDecode:
        """Greedy text for `encoded` (frames, d) after `prompt`, at most `max_tokens` in all
        (prompt included), stopping at `eot`. `draft` is a guess at the text (the last
        decode of this utterance): it goes through the decoder with the prompt in one
        batched pass and each row's greedy choice is checked against it. Where the guess
        fails, the text so far is looked up in the draft again (a revised word: the rest
        often still holds) and the continuation checked in one pass from there. Each right
        token saves a decoder step; the text is the greedy one whatever the guess, but for
        int8 rounding: the rows of one pass share their activation scales (fbgemm
        quantizes per call), so a near-tie between two tokens can fall the other way.
        With `marks`, the result carries `closing_prob` (see the module docstring)."""
        assert len(prompt) < max_tokens <= MAX_POSITIONS, (prompt, max_tokens)
        room = max_tokens - len(prompt)
        with self._lock:
            cross = self._cross_inputs(encoded)
            guess = draft[:room]
            hidden = self._forward(prompt + guess, 0, cross)  # (prompt + guess, d)
            # Projected only where read: at start of transcript (the no-speech probability),
            # after the prompt and after each guessed token. (2 + len(guess), vocab)
            logits = self._head(hidden[[0, *range(len(prompt) - 1, len(hidden))]])
            no_speech_prob = float(logits[0].softmax(-1)[no_speech])
            logits[1, self._suppress_begin] = -math.inf  # no blank or EOT first
            rows = list(logits[1:])  # rows[i]: the next token's logits if guess[:i] holds
            tokens: list[int] = []
            sum_logprob, accepted = 0.0, 0
            floor = 0  # draft position after the last token guessed right
            ends = frozenset([eot, *marks.closing, *marks.trailing]) if marks else frozenset()
            closing_prob: float | None = None
            while True:
                if not rows:  # guess again from the draft, checked in one pass
                    guess, floor = _continuation(tokens, draft, floor)
                    guess = guess[: min(_MAX_GUESS, room - len(tokens))]
                    position = len(prompt) + len(tokens) - 1
                    rows = list(self._head(self._forward(tokens[-1:] + guess, position, cross)))
                row = rows.pop(0)
                row[self._suppress] = -math.inf
                logprobs = row.log_softmax(-1)
                token = int(logprobs.argmax())
                sum_logprob += float(logprobs[token])
                if marks and token in ends and (not tokens or tokens[-1] not in ends):
                    closing_prob = _closing_share(logprobs, marks, eot)  # a word just ended
                if token == eot:
                    break
                if rows and token == guess[0]:
                    guess, floor, accepted = guess[1:], floor + 1, accepted + 1
                else:
                    rows.clear()  # rows after a wrong guess saw the wrong text
                tokens.append(token)
                if len(tokens) >= room:
                    closing_prob = None  # cut off at the budget: no last word to read
                    break
        return TextDecode(tokens, accepted, sum_logprob, no_speech_prob, closing_prob)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], self._heads, -1).transpose(0, 1)  # (T, d) -> (H, T, D)

    def _cross_inputs(self, encoded: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer: cross-attention keys, transposed (H, D, frames), and values
        (H, frames, D)."""
        keys_values = self._cross_kv(encoded).split(self._width, -1)  # 2 x layers (frames, d)
        return [
            (self._split_heads(key).transpose(1, 2).contiguous(), self._split_heads(value))
            for key, value in zip(keys_values[::2], keys_values[1::2], strict=True)
        ]

    def _forward(
        self, tokens: list[int], start: int, cross: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """Hidden states (len(tokens), d) of `tokens` at positions start...; the cache must
        hold positions before `start`."""
        count, end = len(tokens), start + len(tokens)
        x = self._embeddings[tokens].float() + self._positions[start:end]  # (T, d)
        for index, layer in enumerate(self._layers):
            query, key, value = layer.qkv(layer.self_norm(x)).split(self._width, -1)
            cache = self._cache[index]  # (2, H, positions, D)
            cache[0, :, start:end] = self._split_heads(key)
            cache[1, :, start:end] = self._split_heads(value)
            keys, values = cache[0, :, :end], cache[1, :, :end]
            if count > 1:  # a batched pass: query i sees the keys up to position start + i
                mask = torch.ones(count, end, dtype=torch.bool).tril(start)
                attended = F.scaled_dot_product_attention(
                    self._split_heads(query), keys, values, attn_mask=mask, scale=1.0
                )
            else:  # one query: three plain ops beat SDPA's dispatch (~250 us) here
                weights = torch.bmm(self._split_heads(query), keys.transpose(1, 2)).softmax(-1)
                attended = torch.bmm(weights, values)  # (H, 1, D)
            x = x + layer.self_out(attended.transpose(0, 1).reshape(count, self._width))
            cross_keys_t, cross_values = cross[index]
            query = self._split_heads(layer.cross_query(layer.cross_norm(x)))
            attended = torch.bmm(torch.bmm(query, cross_keys_t).softmax(-1), cross_values)
            x = x + layer.cross_out(attended.transpose(0, 1).reshape(count, self._width))
            x = x + layer.ffn_out(F.gelu(layer.ffn_in(layer.ffn_norm(x))))
        return self._final_norm(x)


@lru_cache(maxsize=4)
def load_text_decoder(model_dir: str) -> TextDecoder:
    """One decoder per model directory and process (its KV cache is reused per decode)."""
    return TextDecoder(Path(model_dir))
