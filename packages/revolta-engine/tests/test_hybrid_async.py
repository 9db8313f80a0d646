"""Asynchronous scheduling of hybrid models (Gated DeltaNet state slots) changes no output.

The next step launches before the last step's tokens are read. State slots follow the stream's order; a state
snapshot of a block whose last token is still in flight is taken anyway and keyed by the block's hash once
the token arrives, so prefix-cache hits on generated text still find it.
"""

from __future__ import annotations

import pytest
import torch
from hybrid_checkpoints import make_family_checkpoint

from revolta_engine import LLM, SamplingParams
from revolta_engine.core.state_slots import StateSlots

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    return make_family_checkpoint(tmp_path_factory.mktemp("hybrid-async"), "qwen3_5_moe")


def _prompts(lengths, seed: int, vocab: int = 200) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


def _tokens(outs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outs]


def _pair(path, **kw) -> tuple[LLM, LLM]:
    base = {"dtype": "float32", "max_model_len": 512, "block_size": 16, **kw}
    return LLM(str(path), async_scheduling=False, **base), LLM(str(path), async_scheduling=True, **base)


def test_batched_chunked_and_preempted_match_the_synchronous_loop(qwen35):
    sync, asyn = _pair(qwen35)
    assert asyn.llm_engine.async_scheduling and not sync.llm_engine.async_scheduling
    ps = [{"prompt_token_ids": p} for p in _prompts((5, 40, 130, 17, 64, 1), seed=1)]
    params = [SamplingParams(temperature=0.0, max_tokens=6 + 3 * i, ignore_eos=True) for i in range(len(ps))]
    want = _tokens(sync.generate(ps, params))
    assert _tokens(asyn.generate(ps, params)) == want
    chunked = LLM(str(qwen35), dtype="float32", max_model_len=512, max_num_batched_tokens=16, async_scheduling=True)
    assert _tokens(chunked.generate(ps, params)) == want
    small = LLM(str(qwen35), dtype="float32", max_model_len=512, num_gpu_blocks_override=12, async_scheduling=True)
    eight = [{"prompt_token_ids": p} for p in _prompts((40,) * 8, seed=6)]
    assert _tokens(small.generate(eight, GREEDY)) == _tokens(sync.generate(eight, GREEDY))
    engine = small.llm_engine
    assert engine.get_stats().num_preemptions > 0 and engine.get_stats().kv_cache_usage == 0.0
    slots = engine.kv.state_slots
    assert not slots.owner and slots.num_free == slots.num_running


def test_prefix_hits_on_generated_blocks_find_their_deferred_snapshots(qwen35):
    sync, asyn = _pair(qwen35, enable_prefix_caching=True)
    prompt = _prompts((40,), seed=3)[0]
    params = SamplingParams(temperature=0.0, max_tokens=41, ignore_eos=True)  # 40 + 40 computed
    outs = {}
    for name, llm in (("sync", sync), ("async", asyn)):
        first = llm.generate({"prompt_token_ids": prompt}, params)[0]
        # the next turn: prompt + the reply + more; 80 computed tokens fill 5 blocks, the last two end in generated tokens
        follow = prompt + list(first.outputs[0].token_ids) + _prompts((9,), seed=4)[0]
        second = llm.generate({"prompt_token_ids": follow}, GREEDY)[0]
        outs[name] = (first.outputs[0].token_ids, second.outputs[0].token_ids, second.num_cached_tokens)
        slots = llm.llm_engine.kv.state_slots
        assert not slots._deferred and not slots.owner
    assert outs["async"] == outs["sync"]
    assert outs["async"][2] == 80  # the snapshot after block 5 (its last token was generated) is found


def test_abort_with_a_step_in_flight_frees_slots_and_deferred_snapshots(qwen35):
    llm = LLM(str(qwen35), dtype="float32", max_model_len=512, block_size=4, enable_prefix_caching=True,
              async_scheduling=True)
    engine = llm.llm_engine
    engine.add_request("a", {"prompt_token_ids": _prompts((7,), seed=5)[0]},
                       SamplingParams(max_tokens=50, ignore_eos=True))
    for _ in range(6):
        engine.step()
    slots = engine.kv.state_slots
    engine.abort_request(["a"])
    engine.step()
    assert not slots.owner and slots.num_free == slots.num_running and not slots._deferred
    assert engine.get_stats().kv_cache_usage == 0.0 and not engine.has_unfinished_requests()
    free = len(slots._free_snapshots) + len(slots._snapshots)
    assert free == slots.num_snapshots  # every snapshot slot is either free or keyed


def test_deferred_snapshot_bookkeeping():
    s = StateSlots(2, 2)
    s.assign("r", None)
    a = s.new_deferred_snapshot("r", 3)
    assert a is not None and s.new_deferred_snapshot("r", 3) is None
    s.bind_deferred("r", [b"h0", b"h1", b"h2"])  # block 3's hash is not known yet
    assert s.snapshot(b"h3") is None
    s.bind_deferred("r", [b"h0", b"h1", b"h2", b"h3"])
    assert s.snapshot(b"h3") == a
    b = s.new_deferred_snapshot("r", 4)
    assert b is not None and b != a
    assert s.new_snapshot(b"x") == a  # both slots used: the least recent keyed one is evicted
    s.release("r")  # block 4 never got its hash: its slot is free again
    assert s.new_snapshot(b"y") == b
