"""Counters and gauges the engine exposes (the HTTP layer turns them into Prometheus metrics)."""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

# Upper bounds of vLLM's iteration_tokens_total buckets (tokens run through the model in one engine step).
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@dataclass
class EngineStats:
    """A snapshot of the engine's load and cumulative counters."""

    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    external_prefix_cache_queries: int = 0  # prompt tokens looked up in the KV offload tiers
    external_prefix_cache_hits: int = 0
    num_preemptions: int = 0
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    spec_decode_num_drafts: int = 0  # verification steps that carried drafts
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    # drafts accepted at each position after the newest token (vLLM's per-position counter): how far a proposer's
    # drafts stay right, which num_speculative_tokens should follow
    spec_decode_num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    # engine steps by their token count: one count per ITERATION_TOKEN_BUCKETS bound, then one above the last
    iteration_tokens_counts: list[int] = field(default_factory=lambda: [0] * (len(ITERATION_TOKEN_BUCKETS) + 1))
    iteration_tokens_sum: int = 0

    def note_iteration(self, num_tokens: int) -> None:
        """Count one engine step that ran ``num_tokens`` tokens (prompt chunks, decode and draft tokens)."""
        self.iteration_tokens_counts[bisect_left(ITERATION_TOKEN_BUCKETS, num_tokens)] += 1
        self.iteration_tokens_sum += num_tokens

    def note_drafts(self, proposed: int, accepted: int) -> None:
        """Count one speculative verification (the first ``accepted`` of ``proposed`` drafts kept)."""
        self.spec_decode_num_drafts += 1
        self.spec_decode_num_draft_tokens += proposed
        self.spec_decode_num_accepted_tokens += accepted
        per_pos = self.spec_decode_num_accepted_tokens_per_pos
        per_pos.extend([0] * (proposed - len(per_pos)))
        for i in range(accepted):
            per_pos[i] += 1

    def snapshot(self, scheduler: Any, kv: Any) -> EngineStats:
        """These counters with the current load of ``scheduler`` and ``kv``, as a copy the caller owns."""
        self.num_running = len(scheduler.running)
        self.num_waiting = len(scheduler.waiting)
        self.kv_cache_usage = kv.usage()
        self.prefix_cache_queries = kv.prefix_stats.queries
        self.prefix_cache_hits = kv.prefix_stats.hits
        self.external_prefix_cache_queries = kv.prefix_stats.external_queries
        self.external_prefix_cache_hits = kv.prefix_stats.external_hits
        self.num_preemptions = scheduler.num_preemptions
        return dataclasses.replace(
            self, spec_decode_num_accepted_tokens_per_pos=list(self.spec_decode_num_accepted_tokens_per_pos),
            iteration_tokens_counts=list(self.iteration_tokens_counts))
