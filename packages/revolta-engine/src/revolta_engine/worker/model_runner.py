"""Prepares a scheduled batch's inputs and attention metadata and runs the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from revolta_engine.core.scheduler import ScheduledRequest
from revolta_engine.forward_context import (
    AttentionMetadata,
    ForwardContext,
    LayerKVCache,
    LayerStateCache,
    StateMetadata,
    forward_context,
)


@dataclass
class BatchInputs:
    """Host-built tensors for one forward pass."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    attn: AttentionMetadata
    logits_indices: torch.Tensor  # rows whose last token gets sampled


class ModelRunner:
    """Runs the model over the paged KV cache on one device."""

    def __init__(self, model: Any, kv_caches: list[LayerKVCache], block_size: int,
                 device: torch.device, state_caches: list[LayerStateCache] | None = None) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.state_caches = state_caches or []
        self.block_size = block_size
        self.device = device
        self.graph_runner: Any = None  # a CudaGraphRunner once decode graphs are captured

    def prepare(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]]) -> BatchInputs:
        """Flatten the batch's new tokens and describe where they live in the cache."""
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        qsl = [0]
        ctx_lens: list[int] = []
        logits_rows: list[int] = []
        for s, table in zip(scheduled, block_tables, strict=True):
            req = s.request
            start, end = req.num_computed_tokens, req.num_computed_tokens + s.num_new_tokens
            input_ids.extend(req.all_token_ids[start:end])
            pos = range(start, end)
            positions.extend(pos)
            slots.extend(table[p // bs] * bs + p % bs for p in pos)
            qsl.append(qsl[-1] + s.num_new_tokens)
            ctx_lens.append(end)
            if s.completes:
                logits_rows.append(qsl[-1] - 1)
        width = max(len(t) for t in block_tables)
        tables = [t + [0] * (width - len(t)) for t in block_tables]
        dev = self.device

        def tensor(data, dtype):
            return torch.tensor(data, dtype=dtype).to(dev, non_blocking=True)

        attn = AttentionMetadata(
            slot_mapping=tensor(slots, torch.int64),
            block_tables=tensor(tables, torch.int32),
            context_lens=tensor(ctx_lens, torch.int32),
            query_start_loc=tensor(qsl, torch.int32),
            max_query_len=max(s.num_new_tokens for s in scheduled),
            max_context_len=max(ctx_lens),
        )
        return BatchInputs(tensor(input_ids, torch.int64), tensor(positions, torch.int64), attn,
                           tensor(logits_rows, torch.int64))

    def prepare_state(self, state_slots: list[int], snapshots: list[tuple[int, int, int]]) -> StateMetadata:
        """State slots of the batch's sequences and the ``(sequence, new tokens, slot)`` snapshots to take."""
        def tensor(data):
            return torch.tensor(data, dtype=torch.int64).to(self.device, non_blocking=True)

        seqs, lens, slots = (list(col) for col in zip(*snapshots, strict=True)) if snapshots else ([], [], [])
        return StateMetadata(tensor(state_slots), tensor(seqs), tensor(lens), tensor(slots))

    @torch.inference_mode()
    def execute(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]],
                state_slots: list[int] | None = None,
                snapshots: list[tuple[int, int, int]] | None = None) -> torch.Tensor:
        """Run one forward pass; return float32 logits for the rows that complete their tokens.

        Hybrid models also get each sequence's state slot and the state snapshots to take.
        """
        batch = self.prepare(scheduled, block_tables)
        state = None if state_slots is None else self.prepare_state(state_slots, snapshots or [])
        graphs = self.graph_runner
        # decode graphs hold static state slots; steps that also take state snapshots run eagerly
        graphable = state is None or state.snapshot_seq.numel() == 0
        if graphable and graphs is not None and graphs.can_run(len(scheduled), batch.attn.max_query_len):
            hidden = graphs.run(batch.input_ids, batch.positions, batch.attn,
                                None if state is None else state.state_indices)
        else:
            with forward_context(ForwardContext(batch.attn, self.kv_caches, state, self.state_caches)):
                hidden = self.model(batch.input_ids, batch.positions)
        return self.model.compute_logits(hidden.index_select(0, batch.logits_indices))
