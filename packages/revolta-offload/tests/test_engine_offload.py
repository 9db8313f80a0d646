"""KV offload through the real engine on the CPU: stored blocks come back instead of being recomputed, and the
generations equal those of an engine without offload."""

from __future__ import annotations

import random

import pytest
import torch

from revolta_engine import LLM, SamplingParams
from revolta_engine.core.block_hash import extend_block_hashes
from revolta_engine.errors import InvalidRequestError

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
BLOCK = 16


def prompts(n: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, 400) for _ in range(length)] for _ in range(n)]


def tokens(outputs) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outputs]


def block_contents(llm: LLM, prompt: list[int], n: int) -> list[torch.Tensor]:
    """Keys and values of the device blocks that hold the first ``n`` full blocks of ``prompt`` (by hash)."""
    hashes: list[bytes] = []
    extend_block_hashes(hashes, prompt, BLOCK)
    pool = llm.llm_engine.kv.pool
    ids = [pool.get_cached_block(h).block_id for h in hashes[:n]]
    return [torch.cat([c.key[i].flatten(), c.value[i].flatten()]).clone()
            for c in llm.llm_engine.runner.kv_caches for i in ids]


@pytest.fixture(scope="module")
def reference(tiny_llama):
    """Greedy generations of an engine without offload (and without any prefix reuse)."""
    llm = LLM(str(tiny_llama), enable_prefix_caching=False)
    ps = prompts(3, 70)
    return ps, tokens(llm.generate(ps, GREEDY))


def engine(model, **kw) -> LLM:
    return LLM(str(model), block_size=BLOCK, **kw)


def test_prefix_evicted_from_the_device_cache_comes_back_from_cpu_memory(tiny_llama, reference):
    ps, expected = reference
    llm = engine(tiny_llama, kv_offloading_size=0.05)
    assert tokens(llm.generate(ps, GREEDY)) == expected
    full = (70 - 1) // BLOCK
    before = block_contents(llm, ps[0], full)
    assert llm.llm_engine.kv.pool.reset_prefix_cache()  # the device cache forgets every prefix
    for cache in llm.llm_engine.runner.kv_caches:  # and its contents: a reload must really copy them in
        cache.key.fill_(float("nan"))
        cache.value.fill_(float("nan"))
    again = llm.generate(ps, GREEDY)
    assert tokens(again) == expected
    after = block_contents(llm, ps[0], full)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert [o.num_cached_tokens for o in again] == [full * BLOCK] * 3  # none of those blocks recomputed
    stats = llm.llm_engine.get_stats()
    assert stats.external_prefix_cache_hits == 3 * full * BLOCK
    assert stats.prefix_cache_hits == 0
    assert llm.llm_engine.kv_connector.stats().blocks_loaded == 3 * full


def evict_first_then_reload(llm: LLM, ps: list[list[int]], expected: list[list[int]]) -> tuple[int, int]:
    """Generate every prompt in turn on an 8-block device cache (one 70 + 12 token request needs 6, so later
    prompts evict earlier prefixes), then the first prompt again; returns how many of its 4 full blocks were still
    on the device, and the prompt tokens that the reload took from the tiers."""
    for p, want in zip(ps, expected, strict=True):
        assert tokens(llm.generate(p, GREEDY)) == [want]
    pool = llm.llm_engine.kv.pool
    hashes: list[bytes] = []
    extend_block_hashes(hashes, ps[0], BLOCK)
    on_device = next((i for i, h in enumerate(hashes[:4]) if pool.get_cached_block(h) is None), 4)
    assert on_device < 4  # later prompts took (tail first) the blocks of the first one
    hits = llm.llm_engine.get_stats().external_prefix_cache_hits
    first = llm.generate(ps[0], GREEDY)
    assert tokens(first) == [expected[0]]
    assert first[0].num_cached_tokens == 4 * BLOCK  # device hits, then the rest from CPU memory
    return on_device, llm.llm_engine.get_stats().external_prefix_cache_hits - hits


def test_small_device_cache_reloads_blocks_it_had_to_evict(tiny_llama, reference):
    ps, expected = reference
    llm = engine(tiny_llama, kv_offloading_size=0.05, num_gpu_blocks_override=8, max_num_seqs=1)
    on_device, from_tiers = evict_first_then_reload(llm, ps, expected)
    assert from_tiers == (4 - on_device) * BLOCK


def test_files_survive_a_restart_and_damaged_ones_are_recomputed(tiny_llama, reference, tmp_path, caplog):
    ps, expected = reference
    first = engine(tiny_llama, kv_offload_path=str(tmp_path))
    assert tokens(first.generate(ps, GREEDY)) == expected
    first.llm_engine.shutdown()  # queued writes finish
    files = sorted(tmp_path.rglob("*.kvblock"))
    assert len(files) == 3 * ((70 + 12 - 1) // BLOCK)  # every full block of prompt and output
    assert not list(tmp_path.rglob("*.tmp"))

    second = engine(tiny_llama, kv_offload_path=str(tmp_path))
    out = second.generate(ps[:2], GREEDY)
    assert tokens(out) == expected[:2]
    assert [o.num_cached_tokens for o in out] == [4 * BLOCK] * 2

    # damage every stored file: the next engine recomputes, warns, and stores intact blocks again
    for f in sorted(tmp_path.rglob("*.kvblock")):
        data = f.read_bytes()
        f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    third = engine(tiny_llama, kv_offload_path=str(tmp_path))
    out = third.generate(ps[2], GREEDY)
    assert tokens(out) == [expected[2]]
    assert out[0].num_cached_tokens == 0
    assert "damaged" in caplog.text
    third.llm_engine.shutdown()
    fourth = engine(tiny_llama, kv_offload_path=str(tmp_path))
    out = fourth.generate(ps[2], GREEDY)
    assert tokens(out) == [expected[2]] and out[0].num_cached_tokens == 4 * BLOCK


def test_preempted_requests_resume_from_the_tiers(tiny_llama):
    """Requests pushed out of a tiny device cache come back with their prompt and generated blocks copied in."""
    ps = prompts(6, 40, seed=9)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    expected = tokens(engine(tiny_llama, enable_prefix_caching=False).generate(ps, params))
    llm = engine(tiny_llama, kv_offloading_size=0.05, num_gpu_blocks_override=12)
    assert tokens(llm.generate(ps, params)) == expected
    stats = llm.llm_engine.get_stats()
    assert stats.num_preemptions > 0 and stats.external_prefix_cache_hits > 0


def test_int8_kv_cache_blocks_keep_their_scales(tiny_llama):
    ps = prompts(2, 50, seed=3)
    base = engine(tiny_llama, kv_cache_dtype="int8", enable_prefix_caching=False)
    expected = tokens(base.generate(ps, GREEDY))
    llm = engine(tiny_llama, kv_cache_dtype="int8", kv_offloading_size=0.05)
    assert tokens(llm.generate(ps, GREEDY)) == expected
    llm.llm_engine.kv.pool.reset_prefix_cache()
    again = llm.generate(ps, GREEDY)
    assert tokens(again) == expected and again[0].num_cached_tokens == 3 * BLOCK


def test_cache_salt_keeps_tenants_apart(tiny_llama):
    llm = engine(tiny_llama, kv_offloading_size=0.05)
    p = prompts(1, 40, seed=5)[0]
    salted = SamplingParams(temperature=0.0, max_tokens=4, extra_args={"cache_salt": "tenant-a"})
    llm.generate(p, salted)
    llm.llm_engine.kv.pool.reset_prefix_cache()
    other = llm.generate(p, SamplingParams(temperature=0.0, max_tokens=4, extra_args={"cache_salt": "tenant-b"}))
    assert other[0].num_cached_tokens == 0
    llm.llm_engine.kv.pool.reset_prefix_cache()
    assert llm.generate(p, salted)[0].num_cached_tokens == 2 * BLOCK


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(kv_offloading_size=1, enable_prefix_caching=False), "needs prefix caching"),
    (dict(kv_offloading_size=-1), "kv_offloading_size must be >= 0"),
    (dict(kv_offload_disk_size=4), "needs kv_offload_path"),
    (dict(kv_offload_path="PATH", kv_offload_disk_size=0), "kv_offload_disk_size must be > 0"),
    (dict(kv_offload_path="FILE"), "cannot write KV offload files"),
])
def test_bad_offload_options_fail_at_startup(tiny_llama, tmp_path, kwargs, message):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    kwargs = {k: (str(tmp_path) if v == "PATH" else str(blocker) if v == "FILE" else v) for k, v in kwargs.items()}
    with pytest.raises(InvalidRequestError, match=message):
        engine(tiny_llama, **kwargs)


def test_hybrid_models_are_refused(tmp_path):
    from hybrid_checkpoints import make_family_checkpoint

    model = make_family_checkpoint(tmp_path, "qwen3_5")
    with pytest.raises(InvalidRequestError, match="recurrent"):
        LLM(str(model), kv_offloading_size=0.05)
