"""Hybrid (Gated DeltaNet) models' recurrent state slots around an engine step: the pending slot resets and the
block-boundary snapshots before the forward pass, the per-draft snapshots of a verification step, and the rollback
to the state after the last kept token once the step's tokens are known (a verification graph also pads shorter
rows, whose state then goes back past the padding)."""

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
        # request id -> (its first scratch slot in the current step, the tokens the step fed its state)
        self._draft_states: dict[str, tuple[int, int]] = {}

    def execute(self, scheduled: list, tables: list[list[int]], keep_rows: Any) -> torch.Tensor:
        """Reset the slots handed out since the last step, then run the pass with its snapshots."""
        assert self.kv.state_slots is not None, "a hybrid model keeps state slots"
        slots, sources = self.kv.state_slots.take_pending()
        self.runner.reset_state_slots(slots, sources)
        snapshots = self.kv.plan_snapshots([(s.request, s.num_new_tokens) for s in scheduled])
        draft_snaps, firsts = draft_state_snapshots(scheduled, self.first_scratch_slot, self.max_drafts)
        state_slots = [self.kv.state_slot(s.request.request_id) for s in scheduled]
        logits = self.runner.execute(scheduled, tables, state_slots, snapshots, keep_rows=keep_rows,
                                     draft_snapshots=draft_snaps)
        # a verification graph feeds every sequence q tokens (its own, then padding) and snapshots them all
        q = self.runner.graph_query_len
        self._draft_states = {}
        for s in scheduled:
            fed = q if q > 1 else s.num_new_tokens
            if s.num_drafts or fed > s.num_new_tokens:
                self._draft_states[s.request.request_id] = (firsts[s.request.request_id], fed)
        return logits

    def keep_tokens(self, request: Request, num_kept: int) -> None:
        """After a step that verified drafts or was padded: the request kept the first ``num_kept`` tokens it fed
        (its own tokens before the first rejected draft); go back to the state after them when the pass went
        further."""
        entry = self._draft_states.get(request.request_id)
        if entry is not None and num_kept < entry[1]:
            self.runner.reset_state_slots([self.kv.state_slot(request.request_id)], [entry[0] + num_kept - 1])
