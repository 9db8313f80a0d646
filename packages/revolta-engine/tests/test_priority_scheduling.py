"""vLLM's priority scheduling policy: lower ``priority`` values are admitted first and preempted last."""

from __future__ import annotations

import pytest
from test_scheduler import run_step

from revolta_engine import LLM, SamplingParams
from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import Scheduler
from revolta_engine.errors import InvalidRequestError


def _request(rid: str, n: int, priority: int, arrival: float) -> Request:
    return Request(rid, list(range(1, n + 1)), SamplingParams(max_tokens=8), 8, {0}, arrival, priority)


def test_waiting_requests_are_admitted_by_priority_then_arrival():
    s = Scheduler(KVCacheManager(64, 4, False), max_num_seqs=2, max_num_batched_tokens=100, max_model_len=100,
                  policy="priority")
    for rid, prio, arrival in (("late-low", 5, 1.0), ("early-low", 5, 0.0), ("high", -1, 2.0), ("mid", 0, 3.0)):
        s.add(_request(rid, 3, prio, arrival))
    assert [x.request.request_id for x in run_step(s).scheduled] == ["high", "mid"]
    assert [r.request_id for r in s.waiting] == ["early-low", "late-low"]


def test_the_lowest_priority_running_request_is_preempted_and_waits_in_its_place():
    # 4 usable blocks of 4 tokens; the high-priority request arrives last but must not be the one to yield
    s = Scheduler(KVCacheManager(5, 4, False), max_num_seqs=4, max_num_batched_tokens=100, max_model_len=100,
                  policy="priority")
    low, high = _request("low", 7, 3, 0.0), _request("high", 7, 0, 1.0)
    s.add(low)
    s.add(high)
    run_step(s)
    run_step(s)
    out = run_step(s)  # both need a third block: the low-priority one yields
    assert out.preempted == [low] and [x.request for x in out.scheduled] == [high]
    s.add(_request("newer-low", 3, 3, 2.0))
    assert [r.request_id for r in s.waiting] == ["low", "newer-low"]


def test_the_engine_finishes_urgent_requests_first(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_num_seqs=1, scheduling_policy="priority")
    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    for rid, prio in (("a", 2), ("b", 0), ("c", 1)):
        engine.add_request(rid, [5, 6, 7, 8], params, priority=prio)
    finished = []
    while engine.has_unfinished_requests():
        finished += [out.request_id for out in engine.step() if out.finished]
    assert finished == ["b", "c", "a"]
    outs = llm.generate([[5, 6, 7]] * 2, params, priority=[1, 0])  # the offline API takes one per prompt
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 3]


def test_priority_needs_the_priority_policy(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32")
    with pytest.raises(InvalidRequestError, match="priority scheduling policy") as err:
        llm.generate([[5, 6, 7]], SamplingParams(max_tokens=1), priority=[1])
    assert err.value.param == "priority"
    assert llm.generate([[5, 6, 7]], SamplingParams(max_tokens=1), priority=[0])  # 0 is every request's default
    with pytest.raises(InvalidRequestError, match="scheduling_policy"):
        LLM(str(tiny_llama), dtype="float32", scheduling_policy="lifo")
