"""The draft proposers that are models (a draft model, the checkpoint's MTP head) behind one interface, and which
one a speculative config needs; n-gram drafts need no model (:func:`revolta_engine.spec_decode.setup.next_drafts`).
"""

from __future__ import annotations

from typing import Any, Protocol

from revolta_engine.core.request import Request
from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.spec_decode.draft_model import load_draft_model
from revolta_engine.spec_decode.mtp import load_mtp_proposer


class DraftProposer(Protocol):
    """What the engine calls on a proposer that runs a model, in a step's order."""

    reads_target_hidden: bool  # its passes read the target's hidden states (see KVCacheManager.drop_last_hit_block)

    @property
    def bytes_per_block(self) -> int:
        """Its KV cache's bytes per block (paid out of the target's KV budget)."""
        ...

    def allocate(self, num_blocks: int, max_num_batched_tokens: int, max_num_seqs: int, target_runner: Any) -> None:
        """Its cache over the target's block ids, once the target's cache is planned."""
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


def load_proposer(spec: Any, checkpoint: Any, target_vocab: int, settings: Any) -> DraftProposer | None:
    """A draft model (``draft_model``), the checkpoint's MTP head (``mtp``), or None (n-gram drafts, or no
    speculation); loaded before the target's cache is planned, so its weights are counted."""
    return (load_draft_model(spec, target_vocab, settings)
            or load_mtp_proposer(spec, checkpoint, target_vocab, settings))
