"""Decode steps replayed from CUDA graphs, one per batch-size bucket (1, 2, 4, 8, ...).

A decode step of a 135M model is ~30 layers x ~15 small kernels: launched one by one
from Python, the GPU waits on the CPU. A captured graph launches them all at once. A
graph has fixed shapes and addresses, so everything it reads lives in static buffers:

- `step_inputs` (Bmax, 3 + max_blocks) int64 on the device, one row per sequence:
  [last token, its position, its KV write slot, block table padded with the scratch
  block]. The host fills a pinned twin and sends the rows in ONE non-blocking copy.
- Context slots and the attention mask are derived inside the graph from the block
  table and the position, over the full context length S = max_blocks * block_size
  (slots past a sequence's position are masked, the scratch block absorbs padding rows).
- KV pools are the runner's tensors (fixed addresses), written in place by the graph.

Prefill stays eager: its shapes vary with every prompt and it is compute-bound.

Sampling runs on the device after the replay (argmax, or temperature/top-k by the
exponential-race trick: argmax(p / E) with E ~ Exp(1) draws from p with no host sync
and no multinomial). The ids go to a pinned host buffer by a non-blocking copy and a
CUDA event is recorded behind it. Trade-off, on purpose: the step then waits on that
event once (one synchronisation per step, for the whole batch, never per token or per
sequence) because the engine must know each token at once to stream its text to TTS,
check for a stop token and schedule the next step; a one-step-lagged read would hide
~the host's bookkeeping time but delay every streamed token by one step, the opposite
of what a voice reply wants. The same wait makes reuse of the pinned input rows safe.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from voxrelay.llm.model import LlamaModel
from voxrelay.llm.sequence import Sequence


def batch_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, ... up to the first power of two >= max_num_seqs."""
    buckets = [1]
    while buckets[-1] < max_num_seqs:
        buckets.append(buckets[-1] * 2)
    return buckets


def sample_on_device(
    logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator
) -> torch.Tensor:
    """Next token id per row of logits (N, V), computed without leaving the device."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k > 0:
        threshold = logits.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # (N, V)
    race = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / race).argmax(dim=-1)


class GraphDecoder:
    """Static-buffer decode for the runner; `capture=False` runs the same code eagerly
    (how the CPU tests check it against the ordinary path)."""

    def __init__(
        self,
        model: LlamaModel,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_size: int,
        scratch_block: int,
        max_context_tokens: int,
        max_num_seqs: int,
        capture: bool,
    ) -> None:
        device = model.device
        self.model = model
        self.k_cache, self.v_cache = k_cache, v_cache
        self.block_size = block_size
        self.scratch_block = scratch_block
        self.buckets = batch_buckets(max_num_seqs)
        self.max_blocks = -(-max_context_tokens // block_size)
        rows, width = self.buckets[-1], 3 + self.max_blocks
        pin = device.type == "cuda"
        self.host_inputs = torch.zeros((rows, width), dtype=torch.int64, pin_memory=pin)
        self._host_rows = self.host_inputs.numpy()  # writes land in the pinned memory
        self.step_inputs = torch.zeros((rows, width), dtype=torch.int64, device=device)
        self.host_ids = torch.zeros(rows, dtype=torch.int64, pin_memory=pin)
        self._offsets = torch.arange(block_size, device=device)
        self._key_positions = torch.arange(self.max_blocks * block_size, device=device)
        self._logit_rows = torch.arange(rows, device=device)
        self.logits: dict[int, torch.Tensor] = {}  # bucket -> (bucket, V) graph output
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._event = torch.cuda.Event() if pin else None
        self._fill_padding(0)
        self.step_inputs.copy_(self.host_inputs)  # warm-up and capture write the scratch block
        if capture:
            self._capture()

    @torch.inference_mode()
    def decode(
        self,
        seqs: list[Sequence],
        sample: Callable[[torch.Tensor], torch.Tensor],
    ) -> list[int]:
        """One decode token for each of `seqs` (each has exactly one pending token)."""
        count = len(seqs)
        bucket = next(size for size in self.buckets if size >= count)
        rows, size = self._host_rows, self.block_size
        for row, seq in enumerate(seqs):
            position = seq.num_computed_tokens
            table = seq.block_table
            rows[row, 0] = seq.token_ids[position]
            rows[row, 1] = position
            rows[row, 2] = table[position // size] * size + position % size
            rows[row, 3 : 3 + len(table)] = table
            rows[row, 3 + len(table) :] = self.scratch_block
        self._fill_padding(count, bucket)
        self.step_inputs[:bucket].copy_(self.host_inputs[:bucket], non_blocking=True)
        graph = self._graphs.get(bucket)
        if graph is not None:
            graph.replay()
            logits = self.logits[bucket]
        else:
            logits = self._forward(bucket)
        ids = sample(logits[:count])  # (count,) on the device
        host_ids = self.host_ids[:count]
        host_ids.copy_(ids, non_blocking=True)
        if self._event is not None:
            self._event.record()
            self._event.synchronize()  # the one wait per step (module docstring)
        return host_ids.tolist()

    def _fill_padding(self, start: int, stop: int | None = None) -> None:
        """Rows past the batch: token 0 at position 0, writing into the scratch block."""
        rows = self._host_rows[start:stop]
        rows[:, :2] = 0
        rows[:, 2] = self.scratch_block * self.block_size
        rows[:, 3:] = self.scratch_block

    def _forward(self, bucket: int) -> torch.Tensor:
        rows = self.step_inputs[:bucket]
        positions = rows[:, 1:2]  # (b, 1)
        tables = rows[:, 3:]  # (b, max_blocks)
        context_slots = (tables[:, :, None] * self.block_size + self._offsets).flatten(1)
        attn_mask = (self._key_positions <= positions[:, :, None]).unsqueeze(1)  # (b,1,1,S)
        hidden = self.model.hidden(
            rows[:, 0:1],
            positions,
            rows[:, 2].contiguous(),  # (b,) index for index_copy_
            context_slots,  # (b, S)
            attn_mask,
            self._logit_rows[:bucket],
            self.k_cache,
            self.v_cache,
        )
        return self.model.project(hidden, bucket)  # one new token per sequence

    @torch.inference_mode()
    def _capture(self) -> None:
        # Warm up on a side stream (cuBLAS handles, SDPA kernel choice), then capture the
        # largest bucket first so the smaller ones fit in its memory pool.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for bucket in self.buckets:
                self._forward(bucket)
        torch.cuda.current_stream().wait_stream(stream)
        pool = torch.cuda.graph_pool_handle()
        for bucket in reversed(self.buckets):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.logits[bucket] = self._forward(bucket)
            self._graphs[bucket] = graph
        torch.cuda.synchronize()
