"""The KV cache manager with a real offload connector over CPU tensors: what is stored, what comes back, and
that a request waiting for free blocks does not go back to the tiers at every step."""

from __future__ import annotations

import torch

from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request
from revolta_engine.sampling_params import SamplingParams
from revolta_engine.worker.kv_cache import KVCacheSpec, allocate_kv_cache
from revolta_offload import CpuTier, TieredOffloadConnector

BS = 4


def setup(num_blocks: int):
    caches = allocate_kv_cache(KVCacheSpec(2, 1, BS, 8, torch.float32), num_blocks, torch.device("cpu"))
    connector = TieredOffloadConnector(caches, torch.device("cpu"), CpuTier(1 << 20), None)
    return caches, connector, KVCacheManager(num_blocks, BS, True, connector=connector)


def request(rid: str, n: int, first: int = 1) -> Request:
    return Request(rid, list(range(first, first + n)), SamplingParams(max_tokens=4), 4, {0})


def admit(kv: KVCacheManager, req: Request) -> bool:
    cached, num_cached = kv.find_cached_prefix(req)
    if not kv.allocate_slots(req, req.num_tokens - num_cached, cached):
        return False
    req.num_computed_tokens = num_cached
    return True


def transfer(kv: KVCacheManager, connector: TieredOffloadConnector) -> None:
    saves, loads = kv.take_transfers()
    if saves:
        connector.save([h for h, _ in saves], [b for _, b in saves])
    if loads:
        connector.load([b for b, _ in loads], [d for _, d in loads])
    connector.flush()


def test_stored_blocks_return_into_new_device_blocks():
    caches, connector, kv = setup(8)
    a = request("a", 13)
    assert admit(kv, a)
    ids = kv.block_ids("a")
    for layer, cache in enumerate(caches):  # "compute" a's KV: distinct values per layer and block
        for j, b in enumerate(ids):
            cache.key[b] = 100 * layer + j
            cache.value[b] = -(100 * layer + j)
    a.num_computed_tokens = 13
    kv.cache_full_blocks(a)
    saves, _ = kv.take_transfers()
    assert [b for _, b in saves] == ids[:3]  # the three full blocks, not the partial fourth
    connector.save([h for h, _ in saves], [b for _, b in saves])
    connector.flush()
    kv.free(a)
    assert kv.pool.reset_prefix_cache()
    for cache in caches:
        cache.key.fill_(float("nan"))
        cache.value.fill_(float("nan"))

    b = request("b", 14)  # same 13 tokens and one more: 3 full blocks can come back
    assert admit(kv, b) and b.num_computed_tokens == 3 * BS
    transfer(kv, connector)
    new_ids = kv.block_ids("b")[:3]
    for layer, cache in enumerate(caches):
        for j, blk in enumerate(new_ids):
            assert torch.all(cache.key[blk] == 100 * layer + j) and torch.all(cache.value[blk] == -(100 * layer + j))
    assert kv.prefix_stats.external_hits == 3 * BS
    # the loaded blocks are in the device prefix cache now, and are not stored a second time
    c = request("c", 14)
    cached, num_cached = kv.find_cached_prefix(c)
    assert [blk.block_id for blk in cached] == new_ids and num_cached == 3 * BS
    b.num_computed_tokens = 14
    kv.cache_full_blocks(b)
    assert kv.take_transfers() == ([], [])


def test_a_waiting_request_reuses_what_the_tiers_returned():
    caches, connector, kv = setup(6)  # 5 usable blocks
    a = request("a", 9)
    assert admit(kv, a)
    a.num_computed_tokens = 9
    kv.cache_full_blocks(a)
    transfer(kv, connector)
    kv.free(a)
    assert kv.pool.reset_prefix_cache()
    hog = request("hog", 16, first=500)
    assert admit(kv, hog)  # 4 blocks taken: one left
    queries, hits = kv.prefix_stats.external_queries, kv.prefix_stats.external_hits
    b = request("b", 20)  # 2 stored blocks + 3 more: 5 blocks, does not fit yet
    for _ in range(3):
        assert not admit(kv, b)
    assert kv.prefix_stats.external_queries == queries + 4 * BS  # looked up once, not at every attempt
    assert kv.prefix_stats.external_hits == hits + 2 * BS
    kv.free(hog)
    assert admit(kv, b) and b.num_computed_tokens == 2 * BS
    assert len(kv.take_transfers()[1]) == 2


def test_long_runs_of_blocks_move_in_chunks(monkeypatch):
    import revolta_offload.connector as conn

    monkeypatch.setattr(conn, "CHUNK_BYTES", 1)  # one block per copy
    caches, connector, kv = setup(12)
    assert connector._chunk == 1
    a = request("a", 41)
    assert admit(kv, a)
    for cache in caches:
        cache.key.copy_(torch.randn_like(cache.key))
        cache.value.copy_(torch.randn_like(cache.value))
    want = [(c.key[b].clone(), c.value[b].clone()) for c in caches for b in kv.block_ids("a")[:10]]
    a.num_computed_tokens = 41
    kv.cache_full_blocks(a)
    transfer(kv, connector)
    kv.free(a)
    assert kv.pool.reset_prefix_cache()
    b = request("b", 41)
    assert admit(kv, b) and b.num_computed_tokens == 40
    transfer(kv, connector)
    got = [(c.key[b].clone(), c.value[b].clone()) for c in caches for b in kv.block_ids("b")[:10]]
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(want, got, strict=True))
