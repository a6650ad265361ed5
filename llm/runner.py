"""Turns a scheduled batch into tensors, runs the model, and samples next tokens."""

from __future__ import annotations

import torch

from voxrelay.llm.cuda_graphs import GraphDecoder, sample_on_device
from voxrelay.llm.model import LlamaModel
from voxrelay.llm.repeats import banned_tokens
from voxrelay.llm.scheduler import ScheduledBatch
from voxrelay.llm.sequence import Sequence, TokenLogprobs
from voxrelay.llm.turn_head import TurnHead


class ModelRunner:
    """Owns the paged KV pool: (L, (num_blocks + 1) * block_size, Hkv, Dh) for K and V.

    The extra last block is scratch: padded query tokens write their K/V there and padded
    context slots read from it (masked out), so the hot path needs no masked scatter.
    """

    def __init__(
        self,
        model: LlamaModel,
        num_blocks: int,
        block_size: int,
        temperature: float,
        top_k: int,
        seed: int,
        no_repeat_ngram: int = 0,
    ) -> None:
        hp = model.hparams
        self.model = model
        self.block_size = block_size
        self.scratch_block = num_blocks
        num_slots = (num_blocks + 1) * block_size
        shape = (hp.num_layers, num_slots, hp.num_kv_heads, hp.head_dim)
        self.k_cache = torch.zeros(shape, dtype=model.dtype, device=model.device)
        self.v_cache = torch.zeros(shape, dtype=model.dtype, device=model.device)
        self.temperature = temperature
        self.top_k = top_k
        self.no_repeat_ngram = no_repeat_ngram
        self.generator = torch.Generator(device=model.device).manual_seed(seed)
        self._block_offsets = torch.arange(block_size, device=model.device)
        self.graphs: GraphDecoder | None = None  # decode from CUDA graphs when set
        # With a head, a probe reports its P(end of turn) instead of P(probed token).
        self.turn_head: TurnHead | None = None
        self.keep_probe_hidden = False  # training the head (bench.turn_head) reads them

    def enable_cuda_graphs(
        self, max_context_tokens: int, max_num_seqs: int, capture: bool = True
    ) -> None:
        """Serve decode steps from static buffers, replayed from CUDA graphs per batch
        bucket (`capture=False`: the same static-buffer code, run eagerly)."""
        self.graphs = GraphDecoder(
            self.model,
            self.k_cache,
            self.v_cache,
            self.block_size,
            self.scratch_block,
            max_context_tokens,
            max_num_seqs,
            capture,
        )

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> list[int | None]:
        """Compute the batch's new tokens; the sampled next token per sequence, or None
        for a sequence whose chunk does not reach the end of its (complete) prompt."""
        device = self.model.device
        size = self.block_size
        seqs, counts = batch.sequences, batch.num_new_tokens
        # A request for log-probabilities runs eagerly: the graphs return only token ids.
        graphs = not batch.is_prefill and all(seq.top_logprobs is None for seq in seqs)
        if self.graphs is not None and graphs:
            # An open prompt with one new token rides in a decode batch: its K/V is
            # written, but nothing is sampled for it.
            sampled_ids = self.graphs.decode(
                seqs, lambda logits: self._sample_on_device(self._ban_repeats(logits, seqs))
            )
            return [
                token if seq.samples_after == 1 else None
                for seq, token in zip(seqs, sampled_ids, strict=True)
            ]
        new_tokens = max(counts)
        context_lens = [
            seq.num_computed_tokens + count for seq, count in zip(seqs, counts, strict=True)
        ]
        max_blocks = -(-max(context_lens) // size)
        input_ids, positions, tables, valid = [], [], [], []
        for seq, count in zip(seqs, counts, strict=True):
            start = seq.num_computed_tokens
            pad = new_tokens - count
            input_ids.append(seq.token_ids[start : start + count] + [0] * pad)
            positions.append(list(range(start, start + count)) + [0] * pad)
            valid.append([True] * count + [False] * pad)
            table = seq.block_table[:max_blocks]
            tables.append(table + [self.scratch_block] * (max_blocks - len(table)))
        input_t = torch.tensor(input_ids, device=device)  # (B, T)
        positions_t = torch.tensor(positions, device=device)  # (B, T)
        tables_t = torch.tensor(tables, device=device)  # (B, max_blocks)
        valid_t = torch.tensor(valid, device=device)  # (B, T)
        write_slots = tables_t.gather(1, positions_t // size) * size + positions_t % size
        write_slots = write_slots.masked_fill(~valid_t, self.scratch_block * size).flatten()
        # Context slot j of a sequence holds position j; j beyond its length is masked.
        context_slots = (tables_t[:, :, None] * size + self._block_offsets).flatten(1)
        context_slots = context_slots[:, : max(context_lens)]  # (B, S)
        key_positions = torch.arange(context_slots.shape[1], device=device)
        attn_mask = (key_positions <= positions_t[:, :, None]).unsqueeze(1)  # (B, 1, T, S)
        sample_rows = [
            index * new_tokens + count - 1
            for index, (seq, count) in enumerate(zip(seqs, counts, strict=True))
            if count == seq.samples_after
        ]
        if not sample_rows:
            sample_rows = [0]  # the forward still writes K/V; these logits are unused
        # Probes: the row before a probed prompt token predicts it; one more logits row
        # of a forward that runs anyway (the lm_head on N + P rows instead of N).
        probes = [
            (seq, index * new_tokens + seq.probe_index - 1 - seq.num_computed_tokens)
            for index, (seq, count) in enumerate(zip(seqs, counts, strict=True))
            if seq.probe_index is not None
            and seq.num_computed_tokens <= seq.probe_index - 1 < seq.num_computed_tokens + count
        ]
        hidden = self.model.hidden(
            input_t,
            positions_t,
            write_slots,
            context_slots,
            attn_mask,
            torch.tensor(sample_rows + [row for _, row in probes], device=device),
            self.k_cache,
            self.v_cache,
        )  # (N + P, D)
        if probes and self.keep_probe_hidden:
            for (seq, _), row in zip(probes, hidden[len(sample_rows) :], strict=True):
                seq.probe_hidden = row.float().cpu()
        if probes and self.turn_head is not None:  # the head reads the hidden state
            self._read_head(probes, hidden[len(sample_rows) :])
            hidden = hidden[: len(sample_rows)]
        logits = self.model.project(hidden, input_t.numel())
        if probes and self.turn_head is None:
            self._read_probes(probes, logits[len(sample_rows) :])
            logits = logits[: len(sample_rows)]
        sampling = [
            seq for seq, count in zip(seqs, counts, strict=True) if count == seq.samples_after
        ]
        tokens = self._sample(self._ban_repeats(logits, sampling))
        if any(seq.top_logprobs is not None for seq in sampling):
            self._read_logprobs(sampling, logits, tokens)
        sampled = iter(tokens)
        return [
            next(sampled) if count == seq.samples_after else None
            for seq, count in zip(seqs, counts, strict=True)
        ]

    def _read_head(self, probes: list[tuple[Sequence, int]], hidden: torch.Tensor) -> None:
        """The end-of-turn head's P(end) on each probed sequence; hidden (P, D)."""
        assert self.turn_head is not None
        for (seq, _), prob in zip(probes, self.turn_head.probabilities(hidden), strict=True):
            seq.probe_prob = prob
            seq.probe_index = None

    def _read_probes(self, probes: list[tuple[Sequence, int]], logits: torch.Tensor) -> None:
        """Store each probed token's probability on its sequence; logits (P, V)."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (P, V)
        targets = [seq.probe_token for seq, _ in probes]
        chosen = log_probs[torch.arange(len(probes)), torch.tensor(targets)].exp().tolist()
        for (seq, _), prob in zip(probes, chosen, strict=True):
            seq.probe_prob = float(prob)
            seq.probe_index = None

    def _read_logprobs(self, seqs: list[Sequence], logits: torch.Tensor, tokens: list[int]) -> None:
        """Each asking sequence's sampled token and top rivals, from the model's own
        distribution (row i of logits (N, V) is sequence i's)."""
        asked = [(row, seq.top_logprobs) for row, seq in enumerate(seqs)]
        rows = [row for row, count in asked if count is not None]
        log_probs = torch.log_softmax(logits[rows].float(), dim=-1)  # (R, V)
        count = max(count for _, count in asked if count is not None)
        top_values, top_ids = log_probs.topk(count, dim=-1)
        chosen = log_probs[torch.arange(len(rows)), torch.tensor([tokens[r] for r in rows])]
        for index, row in enumerate(rows):
            seq = seqs[row]
            wanted = seq.top_logprobs or 0
            pairs = zip(top_ids[index, :wanted].tolist(), top_values[index, :wanted].tolist(),
                        strict=True)  # fmt: skip
            seq.logprobs = TokenLogprobs(float(chosen[index]), tuple(pairs))

    def _ban_repeats(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """Row i of `logits` with the tokens that would repeat an n-gram of sequence i's
        reply at -inf (llm/repeats.py; n = no_repeat_ngram, 0 = off)."""
        rows: list[int] = []
        ids: list[int] = []
        for row, seq in enumerate(seqs):
            banned = banned_tokens(seq.token_ids[seq.num_prompt_tokens :], self.no_repeat_ngram)
            rows += [row] * len(banned)
            ids += banned
        if not rows:
            return logits
        logits = logits.clone()
        logits[rows, ids] = float("-inf")
        return logits

    def _sample_on_device(self, logits: torch.Tensor) -> torch.Tensor:
        return sample_on_device(logits, self.temperature, self.top_k, self.generator)

    def _sample(self, logits: torch.Tensor) -> list[int]:
        """Next token per row of logits (N, V); greedy when temperature is 0."""
        if self.temperature == 0:
            return logits.argmax(dim=-1).tolist()
        logits = logits / self.temperature
        if self.top_k > 0:
            threshold = logits.topk(self.top_k, dim=-1).values[:, -1:]  # (N, 1)
            logits = logits.masked_fill(logits < threshold, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(1).tolist()
