"""The token-budget scheduler: chunking, admission limits and preemption."""

from __future__ import annotations

from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request, RequestStatus
from revolta_engine.core.scheduler import Scheduler
from revolta_engine.sampling_params import SamplingParams


def make_request(rid: str, n: int) -> Request:
    return Request(rid, list(range(1, n + 1)), SamplingParams(max_tokens=8), 8, {0})


def run_step(s: Scheduler, sample: int = 7):
    out = s.schedule()
    for item in out.scheduled:
        completes = item.completes
        s.advance(item)
        if completes:
            item.request.append_token(sample)
    return out


def test_long_prompt_is_chunked_within_the_budget():
    s = Scheduler(KVCacheManager(64, 4, False), max_num_seqs=4, max_num_batched_tokens=16, max_model_len=100)
    s.add(make_request("a", 40))
    sizes = [run_step(s).num_tokens for _ in range(4)]
    assert sizes == [16, 16, 8, 1]  # 40 prompt tokens in three chunks, then one decode token


def test_max_num_seqs_limits_admission():
    s = Scheduler(KVCacheManager(64, 4, False), max_num_seqs=2, max_num_batched_tokens=100, max_model_len=100)
    for i in range(3):
        s.add(make_request(str(i), 3))
    out = run_step(s)
    assert [x.request.request_id for x in out.scheduled] == ["0", "1"]
    assert len(s.waiting) == 1


def test_preemption_frees_the_newest_request_and_it_recomputes():
    # 4 usable blocks of 4 tokens; two requests of 7 tokens each grow until one must yield.
    s = Scheduler(KVCacheManager(5, 4, False), max_num_seqs=4, max_num_batched_tokens=100, max_model_len=100)
    a, b = make_request("a", 7), make_request("b", 7)
    s.add(a)
    s.add(b)
    run_step(s)  # both prefill 7 tokens: 2 blocks each, all 4 used
    assert not run_step(s).preempted  # the 8th token still fits in 2 blocks
    out = run_step(s)  # the 9th needs a third block each: the newest request yields
    assert out.preempted == [b]
    assert b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert s.waiting[0] is b and s.num_preemptions == 1
    assert b.num_tokens == 9, "its sampled tokens are kept and recomputed later"
    assert [x.request for x in out.scheduled] == [a]


def test_finish_frees_blocks():
    kv = KVCacheManager(10, 4, False)
    s = Scheduler(kv, 4, 100, 100)
    r = make_request("a", 5)
    s.add(r)
    run_step(s)
    assert kv.usage() > 0
    s.finish(r, RequestStatus.FINISHED_ABORTED)
    assert kv.usage() == 0 and not s.has_unfinished()


def test_drafts_are_scheduled_after_the_newest_token_and_dropped_before_preempting():
    s = Scheduler(KVCacheManager(4, 4, False), max_num_seqs=4, max_num_batched_tokens=100, max_model_len=100)
    a, b = make_request("a", 5), make_request("b", 3)
    s.add(a)
    s.add(b)
    run_step(s)  # both prefilled, one token each: a holds 2 blocks (6 tokens), b 1 block (4 tokens); 3 usable
    a.spec_token_ids = [3, 4]
    out = s.schedule()
    first = out.scheduled[0]
    assert first.request is a and first.num_new_tokens == 3 and first.num_drafts == 2 and first.completes
    assert not out.preempted
    # b's block is full: its next token needs a new block, and no draft room is left anywhere
    b.spec_token_ids = [9, 9, 9, 9]
    s.kv.free(a)
    s.running.remove(a)
    hog = make_request("hog", 8)
    assert s.kv.allocate_slots(hog, 8, [])  # 2 blocks: nothing free but b's own
    out = s.schedule()
    assert [(x.request.request_id, x.num_new_tokens, x.num_drafts) for x in out.scheduled] == [("b", 1, 0)]
    assert not out.preempted and b.spec_token_ids == []
