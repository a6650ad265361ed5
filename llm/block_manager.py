"""Paged KV cache bookkeeping with prefix caching.

The cache is a pool of fixed-size blocks; each sequence maps its positions onto blocks
through `block_table`. A full block is registered under a hash chained over all token
ids up to its end, only after its K/V has been written. A new sequence whose leading
blocks hash the same (and whose tokens compare equal, so a hash collision cannot leak
another prompt's K/V) reuses them with a refcount: a session's system prompt and dialogue
history are computed once. Freed blocks keep their hash and stay reusable until the
allocator needs them (lazy eviction, least recently freed first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from voxrelay.llm.sequence import Sequence


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()


def chain_hash(previous_hash: int, token_ids: tuple[int, ...]) -> int:
    # Python's hash of a tuple of ints is deterministic (no per-process salt for ints).
    return hash((previous_hash, token_ids))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(block_id) for block_id in range(num_blocks)]
        # Blocks with ref_count 0, oldest first; the allocator evicts from the front.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._hash_to_block: dict[int, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._hash_to_block)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Fresh blocks `seq` needs so that its table covers positions 0..num_tokens-1."""
        return max(0, -(-num_tokens // self.block_size) - len(seq.block_table))

    def reuse_cached_prefix(self, seq: Sequence) -> int:
        """Attach cached blocks that continue `seq`'s computed prefix; returns tokens gained.

        Stops one token short of the end: the last token must be computed to get logits;
        likewise short of a probed position (`Sequence.probe_index`), whose logits the
        probe reads.
        """
        if not self.enable_prefix_caching:
            return 0
        size = self.block_size
        limit = seq.num_tokens - 1
        if seq.probe_index is not None:
            limit = min(limit, seq.probe_index - 1)
        gained = 0
        while (
            seq.num_computed_tokens % size == 0
            and len(seq.block_table) * size == seq.num_computed_tokens
            and seq.num_computed_tokens + size <= limit
        ):
            start = seq.num_computed_tokens
            token_ids = tuple(seq.token_ids[start : start + size])
            previous = seq.block_hashes[-1] if seq.block_hashes else 0
            block_hash = chain_hash(previous, token_ids)
            block_id = self._hash_to_block.get(block_hash)
            if block_id is None or self.blocks[block_id].token_ids != token_ids:
                break
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self._free[block_id]
            block.ref_count += 1
            seq.block_table.append(block_id)
            seq.block_hashes.append(block_hash)
            seq.num_computed_tokens += size
            seq.num_cached_tokens += size
            gained += size
        return gained

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Extend `seq`'s table to cover `num_tokens` positions; False if the pool is short."""
        needed = self.blocks_needed(seq, num_tokens)
        if needed > len(self._free):
            return False
        for _ in range(needed):
            block_id, _ = self._free.popitem(last=False)
            block = self.blocks[block_id]
            if block.hash is not None and self._hash_to_block.get(block.hash) == block_id:
                del self._hash_to_block[block.hash]
            block.hash, block.token_ids, block.ref_count = None, (), 1
            seq.block_table.append(block_id)
        return True

    def register_computed_blocks(self, seq: Sequence) -> None:
        """Hash the blocks that became full and computed; call after their K/V is written."""
        if not self.enable_prefix_caching:
            return
        size = self.block_size
        for index in range(len(seq.block_hashes), seq.num_computed_tokens // size):
            token_ids = tuple(seq.token_ids[index * size : (index + 1) * size])
            previous = seq.block_hashes[-1] if seq.block_hashes else 0
            block_hash = chain_hash(previous, token_ids)
            seq.block_hashes.append(block_hash)
            block = self.blocks[seq.block_table[index]]
            # A block computed twice (two sequences racing on one prefix) stays unhashed.
            if block.hash is None and block_hash not in self._hash_to_block:
                block.hash, block.token_ids = block_hash, token_ids
                self._hash_to_block[block_hash] = block.block_id

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Keep the K/V of `seq`'s first `num_tokens` computed positions, releasing the
        blocks past them. A full block stays as it is (it may be shared through its
        hash), so a cut inside one goes back to the block's start."""
        size = self.block_size
        keep = min(num_tokens, seq.num_computed_tokens)
        if keep // size < len(seq.block_hashes):
            keep -= keep % size
        kept_blocks = -(-keep // size)
        for block_id in reversed(seq.block_table[kept_blocks:]):
            self._release(block_id)
        del seq.block_table[kept_blocks:]
        del seq.block_hashes[keep // size :]
        seq.num_computed_tokens = keep
        seq.num_cached_tokens = min(seq.num_cached_tokens, keep)

    def free(self, seq: Sequence) -> None:
        """Drop `seq`'s references; its K/V must be recomputed (or re-matched) to run again."""
        # Tail blocks first so that they are evicted before the shared prefix; blocks no
        # hash points to cannot be reused and go to the very front.
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table.clear()
        seq.block_hashes.clear()
        seq.num_computed_tokens = 0

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        assert block.ref_count >= 0, f"block {block_id} freed twice"
        if block.ref_count == 0:
            self._free[block_id] = None
            if block.hash is None:
                self._free.move_to_end(block_id, last=False)
