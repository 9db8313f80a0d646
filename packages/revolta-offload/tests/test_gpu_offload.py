"""KV offload on a CUDA device (marker ``gpu``): copies ordered on the stream with CUDA graphs and asynchronous
scheduling on, pinned host copies, and blocks read back bit-exact from CPU memory and from files."""

from __future__ import annotations

import gc
import random

import pytest
import torch

from revolta_engine import LLM, SamplingParams
from revolta_engine.core.block_hash import extend_block_hashes
from revolta_engine.worker.kv_cache import KVCacheSpec, allocate_kv_cache
from revolta_offload import CpuTier, DiskTier, TieredOffloadConnector
from revolta_offload import connector as connector_module

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
BLOCK = 16
KV_BYTES = 64 << 20


@pytest.fixture(scope="module")
def gpu_llama(tmp_path_factory):
    from checkpoints import make_tiny_checkpoint

    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("gpu") / "llama", "llama", hidden_size=256,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                    intermediate_size=512, num_hidden_layers=4))


def prompts(n: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, 400) for _ in range(length + 13 * i)] for i in range(n)]


def tokens(outputs) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outputs]


def contents(llm: LLM, prompt: list[int], n: int) -> list[torch.Tensor]:
    hashes: list[bytes] = []
    extend_block_hashes(hashes, prompt, BLOCK)
    ids = [llm.llm_engine.kv.pool.get_cached_block(h).block_id for h in hashes[:n]]
    return [torch.cat([c.key[i].flatten(), c.value[i].flatten()]).cpu()
            for c in llm.llm_engine.runner.kv_caches for i in ids]


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8"])
def test_gpu_blocks_come_back_bit_exact(gpu_llama, tmp_path, kv_cache_dtype):
    ps = prompts(4, 90)
    base = LLM(gpu_llama, kv_cache_dtype=kv_cache_dtype, enable_prefix_caching=False, kv_cache_memory_bytes=KV_BYTES)
    expected = tokens(base.generate(ps, GREEDY))
    del base
    torch.cuda.empty_cache()
    llm = LLM(gpu_llama, kv_cache_dtype=kv_cache_dtype, kv_offloading_size=0.25, kv_offload_path=str(tmp_path),
              kv_cache_memory_bytes=KV_BYTES)
    assert llm.llm_engine.async_scheduling
    assert tokens(llm.generate(ps, GREEDY)) == expected
    full = (90 - 1) // BLOCK
    before = contents(llm, ps[0], full)
    assert llm.llm_engine.kv.pool.reset_prefix_cache()
    for cache in llm.llm_engine.runner.kv_caches:
        cache.key.fill_(127 if cache.key.dtype == torch.int8 else float("nan"))
        cache.value.fill_(127 if cache.value.dtype == torch.int8 else float("nan"))
    again = llm.generate(ps, GREEDY)
    assert tokens(again) == expected
    assert [o.num_cached_tokens for o in again] == [((90 + 13 * i - 1) // BLOCK) * BLOCK for i in range(4)]
    after = contents(llm, ps[0], full)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    llm.llm_engine.shutdown()
    del llm
    torch.cuda.empty_cache()

    restarted = LLM(gpu_llama, kv_cache_dtype=kv_cache_dtype, kv_offload_path=str(tmp_path),
                    kv_cache_memory_bytes=KV_BYTES)
    out = restarted.generate(ps, GREEDY)
    assert tokens(out) == expected
    assert restarted.llm_engine.get_stats().external_prefix_cache_hits == sum(o.num_cached_tokens for o in out) > 0


def _parts(caches, ids: list[int]) -> list[torch.Tensor]:
    return [getattr(c, attr)[ids].cpu() for c in caches for attr in ("key", "value", "k_scales", "v_scales")
            if getattr(c, attr).numel() > 0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
def test_cpu_tier_blocks_are_pinned_and_load_bit_exact_into_other_blocks(tmp_path, monkeypatch, dtype):
    """Stored from a CUDA cache, blocks sit pinned in the CPU tier (also those promoted from files) and come back
    bit-equal into other block ids, in several chunks, even when the tier drops them before the copies ran."""
    monkeypatch.setattr(connector_module, "CHUNK_BYTES", 1)  # one block per chunk: exercises the chunking
    dev = torch.device("cuda")
    caches = allocate_kv_cache(KVCacheSpec(3, 2, 64, BLOCK, dtype), 40, dev)
    g = torch.Generator(device=dev).manual_seed(0)
    for c in caches:
        for t in (c.key, c.value):
            t.copy_(torch.randint(-128, 128, t.shape, generator=g, device=dev, dtype=torch.int8)
                    if dtype == torch.int8 else torch.randn(t.shape, generator=g, device=dev, dtype=dtype))
        for s in (c.k_scales, c.v_scales):
            s.copy_(torch.rand(s.shape, generator=g, device=dev))
    hashes = [i.to_bytes(32, "big") for i in range(6)]
    src = [1, 3, 5, 7, 9, 11]
    expected = _parts(caches, src)
    conn = TieredOffloadConnector(caches, dev, CpuTier(1 << 30), DiskTier(tmp_path, "fp", 1 << 30))
    conn.save(hashes, src)
    conn.flush()
    blocks = conn.lookup(hashes)
    assert len(blocks) == 6 and all(t.is_pinned() for b in blocks for t in b.tensors.values())
    assert all(b.footprint >= b.nbytes for b in blocks)  # counted at the host allocator's rounded size
    conn.load([20, 21, 22, 23, 24, 25], blocks)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(_parts(caches, [20, 21, 22, 23, 24, 25]), expected, strict=True))
    conn.close()

    # a fresh CPU tier: the blocks come from the files and are pinned as they are promoted
    promoted = TieredOffloadConnector(caches, dev, CpuTier(1 << 30), DiskTier(tmp_path, "fp", 1 << 30))
    blocks = promoted.lookup(hashes)
    assert len(blocks) == 6 and all(t.is_pinned() for b in blocks for t in b.tensors.values())
    assert all(t.is_pinned() for h in hashes for t in promoted.cpu.get(h).tensors.values())
    sizes = [(t.shape, t.dtype) for b in blocks for t in b.tensors.values()]
    torch.cuda._sleep(1_000_000_000)  # keep the stream busy, so the copies below are still queued when...
    promoted.load([30, 31, 32, 33, 34, 35], blocks)
    promoted.close()
    del blocks, promoted  # ...the blocks are freed, and pinned memory of their sizes is taken and overwritten
    gc.collect()
    junk = [torch.empty(shape, dtype=dt, pin_memory=True).fill_(7) for shape, dt in sizes]
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(_parts(caches, [30, 31, 32, 33, 34, 35]), expected, strict=True))
    del junk
