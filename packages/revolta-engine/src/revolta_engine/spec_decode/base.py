"""The interface every draft proposer implements: n-gram lookup (:mod:`~revolta_engine.spec_decode.ngram`), a draft
model (:mod:`~revolta_engine.spec_decode.draft_model`) and the checkpoint's MTP head
(:mod:`~revolta_engine.spec_decode.mtp`).

The engine calls a proposer in a step's order. After a request's step, :meth:`Proposer.next_drafts` gives the
drafts its next step verifies: n-gram lookup knows them at once, a proposer that runs a model leaves placeholders.
Once that step is scheduled, :meth:`Proposer.propose` fills the placeholders before the target runs. After the
target step, :meth:`Proposer.verified` for each request that verified drafts, then :meth:`Proposer.observe`.
"""

from __future__ import annotations

from typing import Any, Protocol

from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.parallel.step_plan import RemoteRequest, RemoteScheduled, TokenWindow


class Proposer(Protocol):
    """What the engine calls on a draft proposer, in a step's order."""

    reads_target_hidden: bool  # its passes read the target's hidden states (see KVCacheManager.drop_last_hit_block)

    @property
    def bytes_per_block(self) -> int:
        """Its KV cache's bytes per block (paid out of the target's KV budget; 0 without a cache)."""
        ...

    def allocate(self, num_blocks: int, max_num_batched_tokens: int, max_num_seqs: int, target_runner: Any) -> None:
        """Its cache over the target's block ids, once the target's cache is planned."""
        ...

    def next_drafts(self, request: Request, room: int) -> list[int]:
        """Up to ``room`` drafts for the request's next step, as far as they are known after its newest token."""
        ...

    def propose(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]]) -> None:
        """Fill the drafts (``spec_token_ids``) the scheduled step verifies, before the target runs."""
        ...

    def observe(self) -> None:
        """After the target step (tokens appended, rejected drafts taken back)."""
        ...

    def verified(self, request: Request) -> None:
        """After a request's verification step."""
        ...

    def forget(self, request_id: str) -> None:
        """The request finished or was aborted."""
        ...


def placeholder_drafts(room: int) -> list[int]:
    """``room`` draft slots that a proposer running a model fills once the step is scheduled (the scheduler makes
    room for as many)."""
    return [0] * max(room, 0)


def feed_item(request_id: str, start: int, tokens: list[int], completes: bool) -> RemoteScheduled:
    """A proposer's pass over ``tokens`` of a request at positions ``start``..., as a scheduled item its runner
    takes (``completes``: its last row gets logits)."""
    return RemoteScheduled(RemoteRequest(request_id, start, TokenWindow(start, list(tokens)), []), len(tokens),
                           completes, 0)
