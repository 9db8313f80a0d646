"""A periodic log line of the engine's throughput and load, as vLLM prints it (``--disable-log-stats`` stops it)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from revolta_api.engine_client import StatsSnapshot

logger = logging.getLogger("revolta.stats")


def stats_line(before: StatsSnapshot, now: StatsSnapshot, seconds: float) -> str | None:
    """One line on what the engine did between two snapshots ``seconds`` apart; None when it did nothing then
    and holds no request now (an idle server stays quiet)."""
    prompt = now.num_prompt_tokens - before.num_prompt_tokens
    generated = now.num_generation_tokens - before.num_generation_tokens
    if not prompt and not generated and not now.num_running and not now.num_waiting:
        return None
    seconds = max(seconds, 1e-9)
    parts = [f"Avg prompt throughput: {prompt / seconds:.1f} tokens/s",
             f"Avg generation throughput: {generated / seconds:.1f} tokens/s",
             f"Running: {now.num_running} reqs", f"Waiting: {now.num_waiting} reqs",
             f"KV cache usage: {100 * now.kv_cache_usage:.1f}%"]
    queries = now.prefix_cache_queries - before.prefix_cache_queries
    if queries:
        hits = now.prefix_cache_hits - before.prefix_cache_hits
        parts.append(f"Prefix cache hit rate: {100 * hits / queries:.1f}%")
    drafts = now.spec_decode_num_drafts - before.spec_decode_num_drafts
    if drafts:
        proposed = now.spec_decode_num_draft_tokens - before.spec_decode_num_draft_tokens
        accepted = now.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens
        # tokens each verification step yields: the accepted drafts plus the token sampled after them
        parts.append(f"Speculative decoding: mean acceptance length {1 + accepted / drafts:.2f}, "
                     f"accepted {accepted}/{proposed} draft tokens ({100 * accepted / max(proposed, 1):.1f}%), "
                     f"Per-position acceptance rate: {', '.join(f'{r:.3f}' for r in position_rates(before, now))}")
    return ", ".join(parts)


def position_rates(before: StatsSnapshot, now: StatsSnapshot) -> list[float]:
    """Per draft position, the share of the interval's verification steps that accepted a draft there (vLLM's
    per-position acceptance rate: accepted at that position over the steps that carried drafts)."""
    drafts = now.spec_decode_num_drafts - before.spec_decode_num_drafts
    old = before.spec_decode_num_accepted_tokens_per_pos
    return [(n - (old[i] if i < len(old) else 0)) / max(drafts, 1)
            for i, n in enumerate(now.spec_decode_num_accepted_tokens_per_pos)]


async def log_stats_every(interval: float, stats: Callable[[], StatsSnapshot]) -> None:
    """Log :func:`stats_line` every ``interval`` seconds until cancelled."""
    before, since = stats(), time.monotonic()
    while True:
        await asyncio.sleep(interval)
        now, at = stats(), time.monotonic()
        line = stats_line(before, now, at - since)
        if line is not None:
            logger.info("%s", line)
        before, since = now, at
