"""Block manager bookkeeping on hand-made sequences (no model needed)."""

from __future__ import annotations

import pytest

from voxrelay.llm import block_manager as bm
from voxrelay.llm.block_manager import BlockManager
from voxrelay.llm.sequence import Sequence
from voxrelay.llm.tokenizer import IncrementalDetokenizer

BLOCK = 4


def make_seq(token_ids: list[int], request_id: int = 0) -> Sequence:
    return Sequence(
        request_id, list(token_ids), len(token_ids), 8, True, IncrementalDetokenizer([])
    )


def compute_all(manager: BlockManager, seq: Sequence) -> None:
    """What a prefill step does: allocate, (write K/V), mark computed, register."""
    manager.reuse_cached_prefix(seq)
    assert manager.allocate(seq, seq.num_tokens)
    seq.num_computed_tokens = seq.num_tokens
    manager.register_computed_blocks(seq)


def test_allocate_and_free() -> None:
    manager = BlockManager(8, BLOCK, enable_prefix_caching=False)
    seq = make_seq(list(range(10)))
    assert manager.allocate(seq, 10)
    assert len(seq.block_table) == 3 and manager.num_free_blocks == 5
    assert not manager.allocate(make_seq([1]), 100)  # all-or-nothing
    assert manager.num_free_blocks == 5
    manager.free(seq)
    assert manager.num_free_blocks == 8 and seq.num_computed_tokens == 0


def test_prefix_is_shared_with_refcounts() -> None:
    manager = BlockManager(8, BLOCK, enable_prefix_caching=True)
    first = make_seq(list(range(10)))
    compute_all(manager, first)
    assert manager.num_cached_blocks == 2  # two full blocks; the partial one is not hashed
    second = make_seq([*range(9), 99], request_id=1)
    assert manager.reuse_cached_prefix(second) == 8
    assert second.block_table[:2] == first.block_table[:2]
    assert [manager.blocks[b].ref_count for b in first.block_table[:2]] == [2, 2]
    manager.free(first)
    assert [manager.blocks[b].ref_count for b in second.block_table] == [1, 1]


def test_last_token_is_never_served_from_cache() -> None:
    manager = BlockManager(8, BLOCK, enable_prefix_caching=True)
    compute_all(manager, make_seq(list(range(8))))
    again = make_seq(list(range(8)), request_id=1)
    # Both blocks are cached, but the second holds the last token, whose logits we need.
    assert manager.reuse_cached_prefix(again) == 4


def test_freed_blocks_stay_cached_until_evicted() -> None:
    manager = BlockManager(4, BLOCK, enable_prefix_caching=True)
    seq = make_seq(list(range(9)))
    compute_all(manager, seq)
    manager.free(seq)
    assert manager.num_free_blocks == 4 and manager.num_cached_blocks == 2
    assert manager.reuse_cached_prefix(make_seq(list(range(9)), request_id=1)) == 8
    manager = BlockManager(4, BLOCK, enable_prefix_caching=True)
    seq = make_seq(list(range(9)))
    compute_all(manager, seq)
    manager.free(seq)
    hog = make_seq(list(range(100, 116)), request_id=2)
    assert manager.allocate(hog, 16)  # needs every block: the cached ones are evicted
    assert manager.num_cached_blocks == 0
    manager.free(hog)
    assert manager.reuse_cached_prefix(make_seq(list(range(9)), request_id=3)) == 0


def test_unhashed_blocks_are_evicted_first() -> None:
    manager = BlockManager(4, BLOCK, enable_prefix_caching=True)
    seq = make_seq(list(range(6)))  # one full (hashed) block and one partial block
    compute_all(manager, seq)
    partial_block = seq.block_table[1]
    manager.free(seq)
    other = make_seq([50], request_id=1)
    assert manager.allocate(other, 1)
    # The partial block can never be reused, so it goes before the never-used blocks,
    # and the cached full block goes last.
    assert other.block_table == [partial_block]
    assert manager.num_cached_blocks == 1


def test_hash_collision_is_caught_by_token_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm, "chain_hash", lambda previous, token_ids: 42)
    manager = BlockManager(8, BLOCK, enable_prefix_caching=True)
    compute_all(manager, make_seq([1, 2, 3, 4, 5]))
    assert manager.reuse_cached_prefix(make_seq([9, 9, 9, 9, 5], request_id=1)) == 0
    assert manager.reuse_cached_prefix(make_seq([1, 2, 3, 4, 5], request_id=2)) == 4


def test_chained_hash_depends_on_whole_prefix() -> None:
    manager = BlockManager(8, BLOCK, enable_prefix_caching=True)
    compute_all(manager, make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9]))
    # Same second block, different first block: no reuse of either.
    assert manager.reuse_cached_prefix(make_seq([0, 2, 3, 4, 5, 6, 7, 8, 9], request_id=1)) == 0


def test_truncate_keeps_a_partial_block_and_never_rewrites_a_full_one() -> None:
    manager = BlockManager(8, BLOCK, enable_prefix_caching=True)
    seq = make_seq(list(range(10)))  # blocks [0-3] [4-7] full and hashed, [8-9] partial
    compute_all(manager, seq)
    tail = seq.block_table[2]
    manager.truncate(seq, 9)  # inside the partial block: its first position stays
    assert seq.num_computed_tokens == 9 and len(seq.block_table) == 3
    assert seq.block_table[2] == tail and len(seq.block_hashes) == 2
    manager.truncate(seq, 6)  # inside a full block: back to its start
    assert seq.num_computed_tokens == 4 and len(seq.block_table) == 1
    assert len(seq.block_hashes) == 1 and manager.num_free_blocks == 7
    # The full block given up is still in the cache for whoever asks for it.
    again = make_seq(list(range(10)), request_id=1)
    assert manager.reuse_cached_prefix(again) == 8
