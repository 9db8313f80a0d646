"""State-slot bookkeeping of hybrid models: slots per running request, snapshots at block boundaries."""

from __future__ import annotations

from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import Scheduler
from revolta_engine.core.state_slots import StateSlots
from revolta_engine.sampling_params import SamplingParams


def make_request(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, SamplingParams(max_tokens=8), 8, {0})


def step(s: Scheduler):
    out = s.schedule()
    snaps = s.kv.plan_snapshots([(x.request, x.num_new_tokens) for x in out.scheduled])
    for x in out.scheduled:
        completes = x.completes
        s.advance(x)
        if completes:
            x.request.append_token(7)
    return out, snaps


def test_slots_follow_admission_preemption_and_finish():
    slots = StateSlots(num_running=2, num_snapshots=0)
    s = Scheduler(KVCacheManager(6, 4, False, slots), max_num_seqs=2, max_num_batched_tokens=64, max_model_len=64)
    a, b = make_request("a", list(range(1, 9))), make_request("b", list(range(20, 28)))
    s.add(a)
    s.add(b)
    step(s)
    assert set(slots.owner) == {"a", "b"} and slots.num_free == 0
    assert slots.take_pending() == ([slots.owner["a"], slots.owner["b"]], [None, None])
    for _ in range(3):  # the 5 usable blocks run out: b is preempted and its slot returns
        step(s)
    assert s.num_preemptions > 0 and "b" not in slots.owner
    s.finish(a, a.status.FINISHED_ABORTED)
    assert "a" not in slots.owner


def test_snapshots_at_block_boundaries_and_prefix_hit_trimmed_to_a_snapshot():
    slots = StateSlots(num_running=2, num_snapshots=8)
    kv = KVCacheManager(32, 4, True, slots)
    s = Scheduler(kv, max_num_seqs=2, max_num_batched_tokens=64, max_model_len=64)
    first = make_request("a", list(range(1, 15)))  # 14 tokens: blocks end at 4, 8, 12
    s.add(first)
    _, snaps = step(s)
    assert [(seq, n) for seq, n, _ in snaps] == [(0, 4), (0, 8), (0, 12)]
    assert all(slot >= 2 for _, _, slot in snaps)  # snapshot slots come after the running ones
    s.finish(first, first.status.FINISHED_ABORTED)
    # forget the snapshot after block 3: a request sharing 12 tokens can only resume after block 2
    slots._snapshots.pop(first.block_hashes[2])
    second = make_request("b", list(range(1, 13)) + [99, 98, 97])
    s.add(second)
    step(s)
    assert second.num_cached_tokens == 8
    src = slots.pending["b"]
    assert src == slots.snapshot(first.block_hashes[1])


def test_snapshot_slots_are_recycled_least_recently_used_first():
    slots = StateSlots(num_running=1, num_snapshots=2)
    a, b, c = slots.new_snapshot(b"a"), slots.new_snapshot(b"b"), None
    assert slots.new_snapshot(b"a") is None  # already stored
    slots.snapshot(b"a")  # a is now the most recent
    c = slots.new_snapshot(b"c")
    assert c == b and slots.snapshot(b"b") is None and slots.snapshot(b"a") == a
