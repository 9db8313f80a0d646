"""KV offload on a CUDA device (marker ``gpu``): copies ordered on the stream with CUDA graphs and asynchronous
scheduling on, pinned host copies, and blocks read back bit-exact from CPU memory and from files."""

from __future__ import annotations

import random

import pytest
import torch

from revolta_engine import LLM, SamplingParams
from revolta_engine.core.block_hash import extend_block_hashes

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
