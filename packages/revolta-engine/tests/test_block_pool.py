"""BlockPool and KVCacheManager: ref counts, LRU eviction, prefix hits."""

from __future__ import annotations

import pytest

from revolta_engine.core.block_hash import ROOT_HASH, extend_block_hashes, hash_block
from revolta_engine.core.block_pool import BlockPool
from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request
from revolta_engine.sampling_params import SamplingParams


def make_request(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, SamplingParams(max_tokens=4), 4, {0})


def test_null_block_is_never_handed_out():
    pool = BlockPool(4, enable_caching=True)
    got = pool.allocate(3)
    assert [b.block_id for b in got] == [1, 2, 3]
    with pytest.raises(RuntimeError, match="only 0 free"):
        pool.allocate(1)


def test_free_returns_blocks_to_lru_tail_and_cached_blocks_are_evicted_last_used_first():
    pool = BlockPool(5, enable_caching=True)
    a, b = pool.allocate(2)
    pool.cache_block(a, b"h-a")
    pool.free([b, a])  # tail first: b becomes the oldest free block
    assert pool.num_free_blocks() == 4
    fresh = pool.allocate(3)  # 3, 4 (never used) then b
    assert [x.block_id for x in fresh] == [3, 4, b.block_id]
    assert pool.get_cached_block(b"h-a") is a  # a survived: it was freed last


def test_touch_revives_a_free_cached_block():
    pool = BlockPool(3, enable_caching=True)
    (a,) = pool.allocate(1)
    pool.cache_block(a, b"h")
    pool.free([a])
    assert pool.num_free_blocks() == 2
    pool.touch([pool.get_cached_block(b"h")])
    assert a.ref_cnt == 1 and pool.num_free_blocks() == 1
    pool.allocate(1)
    assert pool.get_cached_block(b"h") is a  # the revived block was not evicted


def test_double_free_is_caught():
    pool = BlockPool(3, enable_caching=False)
    (a,) = pool.allocate(1)
    pool.free([a])
    with pytest.raises(AssertionError, match="freed twice"):
        pool.free([a])


def test_block_hashes_chain_and_are_stable():
    h1 = hash_block(None, [1, 2, 3, 4])
    assert h1 == hash_block(None, [1, 2, 3, 4])
    assert h1 != hash_block(None, [1, 2, 3, 5])
    assert hash_block(h1, [5, 6]) != hash_block(None, [5, 6])
    assert hash_block(None, [1], ("salt",)) != hash_block(None, [1])
    # Fixed seed: the same bytes in any process (offload tiers depend on it).
    assert ROOT_HASH.hex().startswith(__import__("hashlib").sha256(b"revolta-prefix-cache-v1").hexdigest()[:8])
    hashes: list[bytes] = []
    extend_block_hashes(hashes, list(range(10)), 4)
    assert len(hashes) == 2 and hashes[1] == hash_block(hashes[0], [4, 5, 6, 7])


def test_prefix_hit_shares_blocks_and_leaves_one_token_to_compute():
    kv = KVCacheManager(num_blocks=10, block_size=4, enable_caching=True)
    first = make_request("a", list(range(12)))
    assert kv.allocate_slots(first, 12)
    first.num_computed_tokens = 12
    kv.cache_full_blocks(first)
    second = make_request("b", list(range(12)))
    hits, n = kv.find_cached_prefix(second)
    assert n == 8, "all 12 tokens are cached but the last block is recomputed so logits exist"
    assert kv.allocate_slots(second, 12 - n, hits)
    assert kv.block_ids("b")[:2] == kv.block_ids("a")[:2]
    assert kv.block_ids("b")[2] != kv.block_ids("a")[2]
    assert kv.prefix_stats.hits == 8 and kv.prefix_stats.queries == 12
    kv.free(first)
    kv.free(second)
    assert kv.usage() == 0.0


def test_allocation_fails_cleanly_when_blocks_run_out():
    kv = KVCacheManager(num_blocks=3, block_size=4, enable_caching=False)
    req = make_request("a", list(range(9)))
    assert not kv.allocate_slots(req, 9)  # needs 3 blocks, only 2 usable
    assert kv.usage() == 0.0
