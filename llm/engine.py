"""The LLM engine: requests in, streamed tokens out, one scheduler iteration per step()."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass

import torch

from voxrelay.llm import kernels
from voxrelay.llm.block_manager import BlockManager
from voxrelay.llm.config import MAX_TOP_LOGPROBS, LLMConfig
from voxrelay.llm.gguf_loader import GGUFFile, read_hparams, read_tokenizer_data
from voxrelay.llm.model import LlamaModel, blocks_cover
from voxrelay.llm.runner import ModelRunner
from voxrelay.llm.scheduler import Scheduler
from voxrelay.llm.sequence import FinishReason, Sequence, SequenceStatus, TokenOutput
from voxrelay.llm.tokenizer import ChatTokenizer
from voxrelay.llm.turn_head import load_head
from voxrelay.pipeline.memory import release_freed_memory

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True, slots=True)
class EngineState:
    """What the engine resolved at start-up from the config and the machine."""

    device: torch.device
    dtype: torch.dtype
    num_kv_blocks: int
    num_threads: int
    cuda_graphs: bool  # decode steps replayed from CUDA graphs
    decode_weights: str  # `LLMConfig.decode_dtype` with "auto" resolved


def resolve_decode_weights(config: LLMConfig, device: torch.device, gguf_file: GGUFFile) -> str:
    """ "gguf" where the block kernels can read this file on this machine, else bfloat16."""
    usable = device.type == "cpu" and kernels.available() and blocks_cover(gguf_file)
    if config.decode_dtype == "auto":
        return "gguf" if usable else "bfloat16"
    if config.decode_dtype == "gguf" and not usable:
        raise ValueError(
            "decode_dtype='gguf' needs the CPU engine, llm/csrc built (`pip install -e .` "
            "with a C compiler), a CPU with AVX2, FMA and F16C, and Q4_1/Q8_0 matmul weights; "
            "use 'bfloat16' here"
        )
    return config.decode_dtype


def resolve_state(config: LLMConfig, gguf_file: GGUFFile) -> EngineState:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is visible; use 'auto' or 'cpu'")
    use_cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    if config.dtype == "auto":
        dtype = torch.bfloat16 if use_cuda else torch.float32
    else:
        dtype = _DTYPES[config.dtype]
    if not use_cuda and config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    cuda_graphs = use_cuda if config.cuda_graphs is None else config.cuda_graphs
    if cuda_graphs and not use_cuda:
        raise ValueError("cuda_graphs=True but the engine runs on the CPU (no CUDA device)")
    blocks = config.kv_cache_tokens // config.kv_block_size
    decode_weights = resolve_decode_weights(config, device, gguf_file)
    return EngineState(device, dtype, blocks, torch.get_num_threads(), cuda_graphs, decode_weights)


class LLMEngine:
    """Streaming engine: `add_request` / `append_tokens` / `step` / `abort`.

    Requests may arrive with an open prompt (`prompt_complete=False`): its tokens are
    prefilled as they come, while the user still speaks, and decoding starts once
    `start_decode` closes it. `step()` runs one forward pass and returns the tokens it
    produced; it never blocks on a whole reply, so a barge-in is a single `abort`.
    """

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        gguf_file = GGUFFile(config.model_path)
        self.state = resolve_state(config, gguf_file)
        hparams = read_hparams(gguf_file)
        if config.max_context_tokens > hparams.max_positions:
            raise ValueError(
                f"max_context_tokens ({config.max_context_tokens}) exceeds the model's "
                f"context length ({hparams.max_positions})"
            )
        self.tokenizer = ChatTokenizer(read_tokenizer_data(gguf_file))
        decode_weights = self.state.decode_weights
        decode_dtype = _DTYPES.get(decode_weights)  # None: "same" or "gguf"
        model = LlamaModel(
            gguf_file,
            hparams,
            self.state.dtype,
            self.state.device,
            decode_dtype,
            pack_weights=config.pack_weights,
            block_decode=decode_weights == "gguf",
        )
        if model.packed:
            release_freed_memory()  # the plain float32 copies packing replaced
        self.runner = ModelRunner(
            model,
            self.state.num_kv_blocks,
            config.kv_block_size,
            config.temperature,
            config.top_k,
            config.seed,
            config.no_repeat_ngram,
        )
        if config.turn_head_path is not None:
            self.runner.turn_head = load_head(
                config.turn_head_path,
                str(gguf_file.metadata.get("general.name", "")),
                hparams.dim,
                hparams.vocab_size,
            )
        if self.state.cuda_graphs:
            self.runner.enable_cuda_graphs(config.max_context_tokens, config.max_num_seqs)
        self.block_manager = BlockManager(
            self.state.num_kv_blocks, config.kv_block_size, config.enable_prefix_caching
        )
        self.scheduler = Scheduler(
            self.block_manager, config.max_num_seqs, config.max_prefill_tokens
        )
        self._requests: dict[int, Sequence] = {}

    def add_request(
        self,
        request_id: int,
        prompt_token_ids: list[int],
        max_new_tokens: int | None = None,
        prompt_complete: bool = True,
        top_logprobs: int | None = None,
    ) -> None:
        """Queue a request. With `prompt_complete=False` the prompt stays open for
        `append_tokens` and nothing is generated until `start_decode`. `top_logprobs`:
        each TokenOutput carries the token's log-probability and that many of its
        likeliest rivals' (None: no log-probabilities)."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id} is already active; abort it or use a new id")
        if not prompt_token_ids:
            raise ValueError("prompt_token_ids is empty; a prompt needs at least one token")
        limit = self.config.max_new_tokens if max_new_tokens is None else max_new_tokens
        if limit < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {limit}")
        if top_logprobs is not None and not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(
                f"top_logprobs must lie in [0, {MAX_TOP_LOGPROBS}], got {top_logprobs}"
            )
        self._check_tokens(prompt_token_ids, len(prompt_token_ids))
        seq = Sequence(
            request_id,
            list(prompt_token_ids),
            len(prompt_token_ids),
            limit,
            prompt_complete,
            self.tokenizer.detokenizer(),
            top_logprobs=top_logprobs,
        )
        self._requests[request_id] = seq
        self.scheduler.add(seq)

    def append_tokens(self, request_id: int, token_ids: list[int]) -> None:
        """Extend the prompt of an open request (one added with `prompt_complete=False`)."""
        seq = self._get(request_id)
        if seq.prompt_complete:
            raise ValueError(f"request {request_id} prompt is complete; tokens cannot be added")
        self._check_tokens(token_ids, seq.num_tokens + len(token_ids))
        seq.token_ids.extend(token_ids)
        seq.num_prompt_tokens = seq.num_tokens

    def replace_prompt(self, request_id: int, token_ids: list[int]) -> None:
        """Make an open request's prompt `token_ids` (a revised word): the K/V of the
        prefix the old and new prompts share stays (up to the start of a full block the
        cut falls in), so only what follows is computed again."""
        seq = self._get(request_id)
        if seq.prompt_complete or seq.num_generated_tokens:
            raise ValueError(f"request {request_id} prompt is complete; it cannot be replaced")
        if not token_ids:
            raise ValueError("prompt_token_ids is empty; a prompt needs at least one token")
        self._check_tokens(token_ids, len(token_ids))
        shared = 0
        for old, new in zip(seq.token_ids, token_ids, strict=False):
            if old != new:
                break
            shared += 1
        # The last prompt token stays uncomputed: the reply's first step computes it.
        self.block_manager.truncate(seq, min(shared, len(token_ids) - 1))
        seq.token_ids = list(token_ids)
        seq.num_prompt_tokens = len(token_ids)
        seq.probe_index = seq.probe_prob = None

    def probe(self, request_id: int, index: int, token_id: int | None = None) -> None:
        """Report the probability the model gives `token_id` (by default the prompt's own
        token there) at prompt position `index` (on the request's first TokenOutput,
        `probe_prob`), read in the prefill that computes position `index - 1`: no extra
        forward pass. Too late once that position is computed."""
        seq = self._get(request_id)
        if not 1 <= index < seq.num_tokens:
            raise ValueError(f"probe index {index} outside the prompt (1..{seq.num_tokens - 1})")
        if token_id is not None and not 0 <= token_id < self.tokenizer.vocab_size:
            raise ValueError(f"probe token {token_id} outside [0, {self.tokenizer.vocab_size})")
        seq.probe_index = index if index - 1 >= seq.num_computed_tokens else None
        seq.probe_token = seq.token_ids[index] if token_id is None else token_id
        seq.probe_prob = None

    def probe_hidden(self, request_id: int) -> torch.Tensor | None:
        """The final hidden state (D,) at the probed row, kept while
        `runner.keep_probe_hidden` is set (training the end-of-turn head)."""
        return self._get(request_id).probe_hidden

    def start_decode(self, request_id: int) -> None:
        """Close the prompt of an open request: generation starts at the next step."""
        self._get(request_id).prompt_complete = True

    def abort(self, request_id: int) -> bool:
        """Stop a request now and free its KV blocks (kept for prefix reuse); False if
        it was unknown or already finished."""
        seq = self._requests.pop(request_id, None)
        if seq is None:
            return False
        seq.finish_reason = "abort"
        self.scheduler.remove(seq)
        return True

    def num_computed_tokens(self, request_id: int) -> int:
        """Tokens of the request whose KV is already written (prefilled or cached)."""
        return self._get(request_id).num_computed_tokens

    def num_cached_tokens(self, request_id: int) -> int:
        """Prompt tokens of an active request served from the prefix cache so far."""
        return self._get(request_id).num_cached_tokens

    def has_unfinished(self) -> bool:
        """True while any request is active, including open prompts waiting for tokens."""
        return bool(self._requests)

    def has_pending_work(self) -> bool:
        """True if `step()` would compute something now."""
        return self.scheduler.has_work()

    def step(self) -> list[TokenOutput]:
        """Run one forward pass (a prefill chunk or one decode token per running request)
        and return the tokens it produced; empty when there is nothing to compute."""
        batch = self.scheduler.schedule()
        if batch is None:
            return []
        sampled = self.runner.run(batch)
        outputs = []
        for seq, count, token_id in zip(
            batch.sequences, batch.num_new_tokens, sampled, strict=True
        ):
            seq.num_computed_tokens += count
            self.block_manager.register_computed_blocks(seq)
            if token_id is not None:
                outputs.append(self._append_generated(seq, token_id))
        return outputs

    def dialogue_prompt_ids(
        self,
        history: SequenceOf[Mapping[str, str]],
        user_text: str,
        system_prompt: str | None = None,
    ) -> list[int]:
        """Prompt ids for the configured system prompt + `history` + a new user turn."""
        system = self.config.system_prompt if system_prompt is None else system_prompt
        return self.tokenizer.dialogue_prompt_ids(system, history, user_text)

    def _append_generated(self, seq: Sequence, token_id: int) -> TokenOutput:
        seq.token_ids.append(token_id)
        text = seq.detokenizer.push(token_id)
        reason: FinishReason | None = None
        if token_id in self.tokenizer.stop_ids:
            reason = "stop"
        elif (
            seq.num_generated_tokens >= seq.max_new_tokens
            or seq.num_tokens >= self.config.max_context_tokens
        ):
            reason = "length"
        cached = seq.num_cached_tokens
        # The probe rides on the first token only.
        probe = seq.probe_prob if seq.num_generated_tokens == 1 else None
        logprobs, seq.logprobs = seq.logprobs, None
        if reason is None:
            return TokenOutput(seq.request_id, token_id, text, False, None, cached, probe, logprobs)
        text += seq.detokenizer.flush()
        seq.finish_reason = reason
        self.scheduler.remove(seq)
        del self._requests[seq.request_id]
        return TokenOutput(seq.request_id, token_id, text, True, reason, cached, probe, logprobs)

    def _get(self, request_id: int) -> Sequence:
        seq = self._requests.get(request_id)
        if seq is None or seq.status is SequenceStatus.FINISHED:
            raise ValueError(
                f"request {request_id} is not active (never added, finished or aborted)"
            )
        return seq

    def _check_tokens(self, token_ids: list[int], total_tokens: int) -> None:
        vocab = self.tokenizer.vocab_size
        if any(not 0 <= token < vocab for token in token_ids):
            raise ValueError(f"token ids must lie in [0, {vocab})")
        if total_tokens >= self.config.max_context_tokens:
            raise ValueError(
                f"prompt of {total_tokens} tokens leaves no room to generate within "
                f"max_context_tokens={self.config.max_context_tokens}"
            )
