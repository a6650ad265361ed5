"""Which sequences run in the next forward pass, and how many tokens each.

A step is either a prefill batch (sequences with several prompt tokens to compute,
chunked under a token budget) or a decode batch (one token per sequence). Prefill goes
first because it is what the time to the first spoken word waits on; when both kinds
are waiting they alternate, so streaming partial prompts never stall a reply in flight.
A sequence that finishes its prompt with a single pending token (a prompt prefilled
while the user spoke, or one served from the prefix cache) joins the decode batch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from voxrelay.llm.block_manager import BlockManager
from voxrelay.llm.sequence import Sequence, SequenceStatus


@dataclass(frozen=True, slots=True)
class ScheduledBatch:
    sequences: list[Sequence]
    num_new_tokens: list[int]  # tokens computed this step, per sequence
    is_prefill: bool


class Scheduler:
    def __init__(
        self, block_manager: BlockManager, max_num_seqs: int, max_prefill_tokens: int
    ) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._last_was_prefill = False
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take `seq` out of the queues and release its KV blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.block_manager.free(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED

    def has_work(self) -> bool:
        return any(seq.num_schedulable_tokens > 0 for seq in (*self.running, *self.waiting))

    def schedule(self) -> ScheduledBatch | None:
        """The next batch, or None when no sequence has a token to compute."""
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
        for seq in self.running:
            self.block_manager.reuse_cached_prefix(seq)
        prefill = [seq for seq in self.running if seq.num_schedulable_tokens > 1]
        decode = [seq for seq in self.running if seq.num_schedulable_tokens == 1]
        run_prefill = bool(prefill) and not (decode and self._last_was_prefill)
        batch = self._prefill_batch(prefill) if run_prefill else self._decode_batch(decode)
        if batch is None and run_prefill and decode:
            batch = self._decode_batch(decode)
        self._last_was_prefill = batch is not None and batch.is_prefill
        return batch

    def _prefill_batch(self, candidates: list[Sequence]) -> ScheduledBatch | None:
        budget = self.max_prefill_tokens
        chosen: list[Sequence] = []
        counts: list[int] = []
        for seq in candidates:
            count = min(seq.num_schedulable_tokens, budget)
            if count == 0 or not self._reserve(seq, seq.num_computed_tokens + count):
                break
            chosen.append(seq)
            counts.append(count)
            budget -= count
        return ScheduledBatch(chosen, counts, is_prefill=True) if chosen else None

    def _decode_batch(self, candidates: list[Sequence]) -> ScheduledBatch | None:
        chosen = [
            seq
            for seq in candidates
            if seq.status is SequenceStatus.RUNNING
            and self._reserve(seq, seq.num_computed_tokens + 1)
        ]
        return ScheduledBatch(chosen, [1] * len(chosen), is_prefill=False) if chosen else None

    def _reserve(self, seq: Sequence, num_tokens: int) -> bool:
        """Blocks for `num_tokens` positions of `seq`, preempting newer sequences if short.

        A preempted sequence keeps its tokens and goes back to the front of the queue; its
        K/V is recomputed later, mostly from the prefix cache if its blocks survive.
        """
        manager = self.block_manager
        while not manager.allocate(seq, num_tokens):
            victim = self.running[-1]
            if victim is seq:
                return False
            self.running.remove(victim)
            manager.free(victim)
            victim.status = SequenceStatus.WAITING
            self.num_preemptions += 1
            self.waiting.appendleft(victim)
        return True
