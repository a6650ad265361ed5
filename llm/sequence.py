"""One generation request as the scheduler sees it, and the records step() returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Literal

import torch

from voxrelay.llm.tokenizer import IncrementalDetokenizer

# "error": a remote backend lost its server mid-reply (the stage logs why).
FinishReason = Literal["stop", "length", "abort", "error"]


class SequenceStatus(Enum):
    WAITING = auto()  # admitted, holds no KV blocks
    RUNNING = auto()  # holds KV blocks, scheduled each step it has work
    FINISHED = auto()


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """A generated token's log-probability under the model's own distribution (its
    logits before temperature, top-k and the repeat ban, as vLLM reports them), and the
    `top` most likely tokens as (id, logprob), most likely first."""

    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class TokenOutput:
    """One generated token of a request: its id, the text it completes, and whether the
    request ended with it ("stop": end-of-turn token, "length": token or context limit).

    `num_cached_tokens`: prompt tokens the prefix cache served (0 where not known yet).
    `probe_prob`: on a request's first token, the probability the model gave the probed
    token at `probe_index` (see Sequence), read from the prefill that computed the
    position before; None when no probe was asked for or it could not be read.
    `logprobs`: the token's log-probabilities, where the request asked for them.
    """

    request_id: int
    token_id: int
    text: str
    finished: bool
    finish_reason: FinishReason | None = None
    num_cached_tokens: int = 0
    probe_prob: float | None = None
    logprobs: TokenLogprobs | None = None


@dataclass(slots=True, eq=False)
class Sequence:
    request_id: int
    token_ids: list[int]  # prompt, then generated tokens
    num_prompt_tokens: int
    max_new_tokens: int
    prompt_complete: bool
    detokenizer: IncrementalDetokenizer
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0  # leading tokens whose K/V sit in the cache
    num_cached_tokens: int = 0  # of those, tokens served by the prefix cache
    block_table: list[int] = field(default_factory=list)  # KV block of positions i*bs..
    block_hashes: list[int] = field(default_factory=list)  # chained hash per full block
    finish_reason: FinishReason | None = None
    # A prompt token whose probability the prefill reads from the logits it computes
    # anyway (the stage asks for the <|im_end|> that closes the user's words: the
    # model's own P(the user's turn is over), docs/llm.md "End-of-turn probe").
    probe_index: int | None = None
    probe_token: int = 0  # the token whose probability is read there
    probe_prob: float | None = None
    probe_hidden: torch.Tensor | None = None  # (D,), kept only while training the head
    # Log-probabilities of each generated token and its `top_logprobs` likeliest rivals
    # (None: not asked for; 0: the token's own only): the runner leaves the last sampled
    # token's in `logprobs`.
    top_logprobs: int | None = None
    logprobs: TokenLogprobs | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_schedulable_tokens(self) -> int:
        """Tokens the next forward may compute.

        An open prompt holds back its last token: when the prompt completes, that token
        is computed in the same step that samples, so the first output token needs no
        extra forward pass and no stored logits.
        """
        pending = len(self.token_ids) - self.num_computed_tokens
        return pending if self.prompt_complete else max(0, pending - 1)

    @property
    def samples_after(self) -> int:
        """How many tokens a step must compute for this sequence to sample (0 = never yet)."""
        return len(self.token_ids) - self.num_computed_tokens if self.prompt_complete else 0
