"""Asynchronous scheduling (the next step launches before the last step's tokens are read) changes no output."""

from __future__ import annotations

import pytest
import torch

from revolta_engine import LLM, RequestOutputKind, SamplingParams
from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import Scheduler

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def prompts(n: int, length: int = 40, seed: int = 0, vocab: int = 200) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    return [{"prompt_token_ids": torch.randint(3, vocab, (length + i,), generator=gen).tolist()} for i in range(n)]


def tokens(outs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outs]


def engines(path, **kw) -> tuple[LLM, LLM]:
    base = {"dtype": "float32", "max_model_len": 256, **kw}
    return LLM(str(path), async_scheduling=False, **base), LLM(str(path), async_scheduling=True, **base)


@pytest.fixture(scope="module")
def pair(tiny_llama):
    return engines(tiny_llama)


def test_batched_greedy_and_chunked_prefill_match_the_synchronous_loop(tiny_llama, pair):
    sync, asyn = pair
    assert asyn.llm_engine.async_scheduling and not sync.llm_engine.async_scheduling
    ps = prompts(8)
    params = [SamplingParams(temperature=0.0, max_tokens=5 + i, ignore_eos=True) for i in range(8)]
    assert tokens(asyn.generate(ps, params)) == tokens(sync.generate(ps, params))
    chunked = LLM(str(tiny_llama), dtype="float32", max_model_len=256, max_num_batched_tokens=16,
                  async_scheduling=True)
    assert tokens(chunked.generate(ps[:3], GREEDY)) == tokens(sync.generate(ps[:3], GREEDY))
    assert asyn.llm_engine.get_stats().kv_cache_usage == 0.0


def test_preemption_with_tokens_in_flight(tiny_llama, pair):
    sync, _ = pair
    ps = prompts(8, seed=3)
    small = LLM(str(tiny_llama), dtype="float32", max_model_len=256, num_gpu_blocks_override=12,
                async_scheduling=True)
    assert tokens(small.generate(ps, GREEDY)) == tokens(sync.generate(ps, GREEDY))
    stats = small.llm_engine.get_stats()
    assert stats.num_preemptions > 0 and stats.kv_cache_usage == 0.0


def test_prefix_cache_hits_with_async_scheduling(tiny_llama, pair):
    sync, _ = pair
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8, async_scheduling=True)
    p = prompts(1, seed=9)[0]
    first = llm.generate(p, GREEDY)[0]
    again = llm.generate(p, GREEDY)[0]
    assert again.num_cached_tokens == 32
    assert tokens([first]) == tokens([again]) == tokens(sync.generate(p, GREEDY))


def test_stop_token_found_while_the_next_step_runs(pair):
    sync, asyn = pair
    p = prompts(1, seed=4)[0]
    full = tokens(sync.generate(p, GREEDY))[0]
    stop = full[4]
    params = SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[stop], ignore_eos=True)
    out = asyn.generate(p, params)[0].outputs[0]
    assert out.token_ids == full[: full.index(stop) + 1] and out.finish_reason == "stop"
    # the token sampled for it in the step already launched is dropped; the engine is clean afterwards
    assert asyn.llm_engine.get_stats().kv_cache_usage == 0.0
    assert tokens(asyn.generate(p, GREEDY)) == [full]


def test_sampling_options_match_the_synchronous_loop(pair):
    sync, asyn = pair
    ps = prompts(4, seed=6)
    params = [
        SamplingParams(temperature=0.8, top_p=0.9, top_k=20, seed=7, max_tokens=8, ignore_eos=True, logprobs=2),
        SamplingParams(temperature=0.0, max_tokens=8, min_tokens=5, logprobs=0),
        SamplingParams(temperature=1.0, seed=3, max_tokens=8, repetition_penalty=1.3, frequency_penalty=0.5,
                       ignore_eos=True),
        SamplingParams(temperature=0.0, max_tokens=8, allowed_token_ids=[5, 9, 11, 40], ignore_eos=True),
    ]
    a, s = asyn.generate(ps, params), sync.generate(ps, params)
    assert tokens(a) == tokens(s)
    for x, y in zip(a, s, strict=True):
        assert x.outputs[0].cumulative_logprob == pytest.approx(y.outputs[0].cumulative_logprob)
    assert set(a[3].outputs[0].token_ids) <= {5, 9, 11, 40}


def test_tokens_are_reported_by_the_next_step(pair):
    sync, asyn = pair
    p = prompts(1, seed=8)[0]
    delta = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    seen: dict[str, list[list[int]]] = {}
    for name, llm in (("sync", sync), ("async", asyn)):
        engine = llm.llm_engine
        engine.add_request("r", p, delta)
        per_step = []
        while engine.has_unfinished_requests():
            per_step.append([t for o in engine.step() for c in o.outputs for t in c.token_ids])
        seen[name] = per_step
    assert sum(seen["sync"], []) == sum(seen["async"], [])
    assert seen["sync"][0] != [] and seen["async"][0] == []  # the first token arrives one call later
    assert len(seen["async"]) == len(seen["sync"]) + 1


def test_abort_and_max_model_len_with_a_step_in_flight(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=48, async_scheduling=True)
    engine = llm.llm_engine
    engine.add_request("a", prompts(1)[0], SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    engine.step()
    engine.abort_request(["a"])
    assert engine.get_stats().kv_cache_usage == 0 and not engine.has_unfinished_requests()
    # a 44-token prompt can grow only to max_model_len: the token that reaches it is never computed on
    out = llm.generate(prompts(1, length=44)[0], SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 4 and out[0].outputs[0].finish_reason == "length"


def test_scheduler_counts_a_token_in_flight_unless_it_ends_the_request():
    s = Scheduler(KVCacheManager(64, 4, False), max_num_seqs=4, max_num_batched_tokens=64, max_model_len=100)
    r = Request("a", [1, 2, 3, 4, 5], SamplingParams(max_tokens=2), 2, {0})
    s.add(r)
    (first,) = s.schedule().scheduled
    assert first.num_new_tokens == 5 and first.completes
    s.advance(first)
    r.num_pending_tokens = 1  # sampled, not read back yet
    (second,) = s.schedule().scheduled
    assert second.num_new_tokens == 1 and second.completes  # it computes the token in flight
    s.advance(second)
    r.append_token(9)  # the first token arrives; the second (the last of max_tokens=2) is in flight
    r.num_pending_tokens = 1
    assert s.schedule().scheduled == []
