"""Hybrid (Gated DeltaNet) models' recurrent state slots around an engine step: the pending slot resets and the
block-boundary snapshots before the forward pass, the per-draft snapshots of a verification step, and the rollback
to the state after the last kept draft once the step's tokens are known."""

from __future__ import annotations

from typing import Any

import torch

from revolta_engine.core.kv_cache_manager import KVCacheManager
from revolta_engine.core.request import Request
from revolta_engine.spec_decode import draft_state_snapshots


class RecurrentStateSteps:
    """Runs the model's passes with the state slots of each scheduled request (hybrid models only)."""

    def __init__(self, kv: KVCacheManager, runner: Any, first_scratch_slot: int, max_drafts: int) -> None:
        self.kv, self.runner = kv, runner
        self.first_scratch_slot, self.max_drafts = first_scratch_slot, max_drafts
        self._draft_states: dict[str, int] = {}  # request id -> its first scratch slot in the current step

    def execute(self, scheduled: list, tables: list[list[int]], keep_rows: Any) -> torch.Tensor:
        """Reset the slots handed out since the last step, then run the pass with its snapshots."""
        assert self.kv.state_slots is not None, "a hybrid model keeps state slots"
        slots, sources = self.kv.state_slots.take_pending()
        self.runner.reset_state_slots(slots, sources)
        snapshots = self.kv.plan_snapshots([(s.request, s.num_new_tokens) for s in scheduled])
        draft_snaps, self._draft_states = draft_state_snapshots(scheduled, self.first_scratch_slot, self.max_drafts)
        state_slots = [self.kv.state_slot(s.request.request_id) for s in scheduled]
        return self.runner.execute(scheduled, tables, state_slots, snapshots + draft_snaps, keep_rows=keep_rows)

    def keep_drafts(self, request: Request, num_kept: int) -> None:
        """After a verification that kept ``num_kept`` tokens (the drafts before the first rejected one, plus the
        sampled one): go back to the state after the last kept draft."""
        self.runner.reset_state_slots([self.kv.state_slot(request.request_id)],
                                      [self._draft_states[request.request_id] + num_kept - 1])
