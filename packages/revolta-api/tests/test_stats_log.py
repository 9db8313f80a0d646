"""The periodic stats log line: throughput over the interval, load now, and nothing while idle."""

from __future__ import annotations

import dataclasses

from revolta_api.stats_log import stats_line
from revolta_engine.engine.stats import EngineStats


def test_busy_interval_reports_throughput_load_prefix_hits_and_acceptance():
    before = EngineStats(num_prompt_tokens=100, num_generation_tokens=50, prefix_cache_queries=64,
                         prefix_cache_hits=16)
    now = EngineStats(num_running=3, num_waiting=1, kv_cache_usage=0.25, num_prompt_tokens=300,
                      num_generation_tokens=90, prefix_cache_queries=164, prefix_cache_hits=91)
    for proposed, accepted in ((4, 4), (4, 2)):
        now.note_drafts(proposed, accepted)
    line = stats_line(before, now, 4.0)
    assert line is not None
    for part in ("Avg prompt throughput: 50.0 tokens/s", "Avg generation throughput: 10.0 tokens/s",
                 "Running: 3 reqs", "Waiting: 1 reqs", "KV cache usage: 25.0%", "Prefix cache hit rate: 75.0%",
                 "mean acceptance length 4.00", "accepted 6/8 draft tokens (75.0%)"):
        assert part in line, part


def test_per_position_acceptance_rates_cover_the_interval_only():
    """vLLM's per-position rate: drafts accepted at each position over the interval's verification steps."""
    before = EngineStats()
    for proposed, accepted in ((3, 3), (3, 0)):  # an earlier interval
        before.note_drafts(proposed, accepted)
    now = dataclasses.replace(before, num_generation_tokens=11,
                              spec_decode_num_accepted_tokens_per_pos=list(before.spec_decode_num_accepted_tokens_per_pos))
    for proposed, accepted in ((4, 4), (4, 2), (4, 1), (3, 0)):
        now.note_drafts(proposed, accepted)
    line = stats_line(before, now, 1.0)
    assert line is not None
    assert "Per-position acceptance rate: 0.750, 0.500, 0.250, 0.250" in line
    assert "mean acceptance length 2.75" in line


def test_idle_server_stays_quiet_but_a_queued_request_is_reported():
    idle = EngineStats(num_prompt_tokens=10, num_generation_tokens=10)
    assert stats_line(idle, EngineStats(num_prompt_tokens=10, num_generation_tokens=10), 10.0) is None
    stuck = EngineStats(num_waiting=2, num_prompt_tokens=10, num_generation_tokens=10)
    line = stats_line(idle, stuck, 10.0)
    assert line is not None and "Waiting: 2 reqs" in line and "Prefix cache" not in line
    assert "Speculative" not in line
