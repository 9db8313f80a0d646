"""A scheduler that thinks in tokens, not phases.

Each step every running request asks for ``num_tokens - num_computed_tokens`` new tokens, within a
shared token budget; waiting requests are admitted with whatever their cached prefix saves them. A long
prompt is simply a request that gets part of its tokens this step and the rest later (chunked prefill);
a request whose blocks cannot be found preempts the newest running request (under the priority policy: the one
of lowest priority, then the newest), which later recomputes.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field

from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request, RequestStatus
from revolta_engine.core.request_queue import make_queue, running_order

logger = logging.getLogger(__name__)


@dataclass
class ScheduledRequest:
    """A request and how many of its tokens this step computes.

    ``completes`` (fixed when scheduled) is True when this step reaches the end of the request's tokens,
    counting a sampled token still in flight, so a new token is sampled.
    """

    request: Request
    num_new_tokens: int
    completes: bool = field(init=False)
    num_drafts: int = field(init=False)  # speculative draft tokens fed after the request's known tokens

    def __post_init__(self) -> None:
        req = self.request
        end = req.num_computed_tokens + self.num_new_tokens
        self.num_drafts = max(0, end - req.num_tokens - req.num_pending_tokens)
        self.completes = end - self.num_drafts == req.num_tokens + req.num_pending_tokens


@dataclass
class SchedulerOutput:
    """What one step runs."""

    scheduled: list[ScheduledRequest] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    failed: list[Request] = field(default_factory=list)  # can never fit in the KV cache

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)


class Scheduler:
    """Continuous batching under ``max_num_seqs`` and ``max_num_batched_tokens``."""

    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, policy: str = "fcfs") -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.by_priority = policy == "priority"
        self.waiting = make_queue(policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _target(self, request: Request) -> int:
        """How many of the request's tokens can be computed now.

        A token still in flight from the device counts (its id reaches the GPU input directly) unless it
        will end the request by length, in which case nothing more is computed for it.
        """
        n, pending = request.num_tokens, request.num_pending_tokens
        if pending and (request.num_output_tokens + pending >= request.max_tokens
                        or n + pending >= self.max_model_len):
            return n
        if request.spec_token_ids and request.num_computed_tokens == n - 1:
            return n + len(request.spec_token_ids)  # the newest token, then the drafts to verify
        return n + pending

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        scheduled_ids: set[str] = set()
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            num_new = min(self._target(request) - request.num_computed_tokens, budget)
            if num_new <= 0:
                i += 1
                continue
            while not self.kv.allocate_slots(request, num_new):
                if request.spec_token_ids:  # drafts are optional: drop them before preempting anyone
                    request.spec_token_ids = []
                    num_new = min(self._target(request) - request.num_computed_tokens, budget)
                    continue
                victim = self.running[-1]
                assert victim.request_id not in scheduled_ids or victim is request
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is request:
                    break
            else:
                out.scheduled.append(ScheduledRequest(request, num_new))
                scheduled_ids.add(request.request_id)
                budget -= num_new
                i += 1
                continue
            # the request preempted itself: the running list shrank past it
        if not out.preempted:
            self._admit_waiting(out, budget)
        return out

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            cached_blocks, num_cached = self.kv.find_cached_prefix(request)
            num_new = min(self._target(request) - num_cached, budget)
            if not self.kv.allocate_slots(request, num_new, cached_blocks):
                if not self.running:
                    need = -(-request.num_tokens // self.kv.block_size)
                    if need > self.kv.pool.num_usable_blocks:
                        # Can never fit: finish it instead of waiting forever.
                        self.waiting.popleft()
                        request.status = RequestStatus.FINISHED_ABORTED
                        request.stop_reason = (
                            f"needs {need} KV blocks but the cache has only {self.kv.pool.num_usable_blocks}"
                        )
                        out.failed.append(request)
                        continue
                break
            self.waiting.popleft()
            request.num_computed_tokens = num_cached
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = num_cached
            request.status = RequestStatus.RUNNING
            if self.by_priority:  # the running list stays in priority order: its end is preempted first
                bisect.insort(self.running, request, key=running_order)
            else:
                self.running.append(request)
            out.scheduled.append(ScheduledRequest(request, num_new))
            budget -= num_new

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        request.spec_token_ids = []
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.push_back_preempted(request)
        logger.debug("preempted %s (KV cache full); it will be recomputed", request.request_id)

    def advance(self, scheduled: ScheduledRequest) -> None:
        """Record that the scheduled tokens were computed and publish newly full blocks."""
        scheduled.request.num_computed_tokens += scheduled.num_new_tokens
        self.kv.cache_full_blocks(scheduled.request)

    def finish(self, request: Request, status: RequestStatus) -> None:
        """Remove a request (finished or aborted) and free its blocks."""
        if request.status.finished and request.request_id not in self.requests:
            return
        request.status = status
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.kv.free(request)
        self.requests.pop(request.request_id, None)
