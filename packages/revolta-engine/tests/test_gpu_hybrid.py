"""GPU tests of the hybrid and MoE families (marker ``gpu``): native kernels in a whole model.

Tiny random checkpoints with the kernels' head sizes (attention and Gated DeltaNet heads of 64): float32 on the GPU
decodes greedily like transformers on the CPU (prompts, chunked prefill, prefix-cache hit), and fp16 decode
replayed from CUDA graphs gives the tokens eager decode gives.
"""

from __future__ import annotations

import pytest
import torch
from hybrid_checkpoints import make_family_checkpoint
from parity import assert_greedy_parity, reference_greedy
from transformers import AutoModelForCausalLM

import revolta_kernels
from revolta_engine import LLM, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not revolta_kernels.native_available(), reason=revolta_kernels.native_status()),
]

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
# head sizes the native kernels take (attention 64, Gated DeltaNet 64): decode graphs need native kernels
NATIVE_SHAPES = dict(head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64)
KV = dict(kv_cache_memory_bytes=2**30)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-hybrid")
    cache: dict = {}

    def get(family: str):
        if family not in cache:
            shapes = dict(head_dim=64) if family == "qwen3_moe" else NATIVE_SHAPES
            path = make_family_checkpoint(root, family, **shapes)
            cache[family] = (path, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
        return cache[family]

    return get


def _prompts(vocab: int, lengths, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


def _check(ref_model, prompts, outs) -> None:
    for prompt, out in zip(prompts, outs, strict=True):
        ref = reference_greedy(ref_model, prompt, GREEDY.max_tokens)
        assert_greedy_parity(ref_model, prompt, out.outputs[0].token_ids, ref)


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next", "qwen3_5_moe"])
def test_float32_gpu_matches_transformers(checkpoints, family):
    path, ref_model = checkpoints(family)
    llm = LLM(str(path), dtype="float32", max_model_len=512, **KV)
    prompts = _prompts(ref_model.config.vocab_size, (5, 40, 130, 300), seed=1)
    _check(ref_model, prompts, llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY))


def test_float32_gpu_chunked_prefill_and_prefix_hit(checkpoints):
    path, ref_model = checkpoints("qwen3_5_moe")
    vocab = ref_model.config.vocab_size
    llm = LLM(str(path), dtype="float32", max_model_len=512, max_num_batched_tokens=16, **KV)
    prompts = _prompts(vocab, (130, 37), seed=2)
    _check(ref_model, prompts, llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY))
    llm = LLM(str(path), dtype="float32", max_model_len=512, enable_prefix_caching=True, **KV)
    shared = _prompts(vocab, (64,), seed=3)[0]
    prompts = [shared + t for t in _prompts(vocab, (21, 9), seed=4)]
    first = llm.generate({"prompt_token_ids": prompts[0]}, GREEDY)[0]
    second = llm.generate({"prompt_token_ids": prompts[1]}, GREEDY)[0]
    assert second.num_cached_tokens == 64
    _check(ref_model, prompts, [first, second])


@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5_moe"])
def test_fp16_graph_replay_equals_eager(checkpoints, family):
    path, ref_model = checkpoints(family)
    graphs = LLM(str(path), dtype="float16", max_model_len=512, max_num_seqs=16, **KV)
    eager = LLM(str(path), dtype="float16", max_model_len=512, max_num_seqs=16, enforce_eager=True, **KV)
    assert graphs.llm_engine.runner.graph_runner is not None, "graphs were not captured"
    for n in (1, 3, 8, 13):
        prompts = [{"prompt_token_ids": p} for p in _prompts(ref_model.config.vocab_size, [9 + 5 * i for i in range(n)],
                                                             seed=10 + n)]
        got = [o.outputs[0].token_ids for o in graphs.generate(prompts, GREEDY)]
        want = [o.outputs[0].token_ids for o in eager.generate(prompts, GREEDY)]
        assert got == want, f"batch of {n}: graph replay differs from eager"


def test_fp16_async_scheduling_matches_the_synchronous_loop(checkpoints):
    """Hybrid models run the asynchronous loop on CUDA: same tokens as the synchronous one, with CUDA graphs,
    prefix-cache snapshots (also of generated blocks, taken while their last token is in flight) and
    batches that grow and shrink."""
    path, ref_model = checkpoints("qwen3_5_moe")
    kw = dict(dtype="float16", max_model_len=512, max_num_seqs=8, enable_prefix_caching=True, **KV)
    asyn = LLM(str(path), **kw)
    sync = LLM(str(path), async_scheduling=False, **kw)
    assert asyn.llm_engine.async_scheduling and not sync.llm_engine.async_scheduling
    vocab = ref_model.config.vocab_size
    shared = _prompts(vocab, (32,), seed=20)[0]
    prompts = [{"prompt_token_ids": shared + t} for t in _prompts(vocab, [3 + 7 * i for i in range(6)], seed=21)]
    params = [SamplingParams(temperature=0.0, max_tokens=20 + 5 * i, ignore_eos=True) for i in range(6)]
    got = [o.outputs[0].token_ids for o in asyn.generate(prompts, params)]
    want = [o.outputs[0].token_ids for o in sync.generate(prompts, params)]
    assert got == want
    follow = {"prompt_token_ids": prompts[5]["prompt_token_ids"] + list(got[5]) + [5, 6, 7]}
    a2, s2 = asyn.generate(follow, GREEDY)[0], sync.generate(follow, GREEDY)[0]
    assert a2.outputs[0].token_ids == s2.outputs[0].token_ids
    assert a2.num_cached_tokens == s2.num_cached_tokens >= 64
    for llm in (asyn, sync):
        slots = llm.llm_engine.kv.state_slots
        assert not slots.owner and not slots._deferred and llm.llm_engine.get_stats().kv_cache_usage == 0.0
