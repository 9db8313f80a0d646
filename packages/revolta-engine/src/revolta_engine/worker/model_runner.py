"""Prepares a scheduled batch's inputs and attention metadata and runs the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
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
from revolta_engine.worker.input_buffers import Layout, StepBuffers, host_views
from revolta_engine.worker.state_cache import reset_slots


@dataclass
class BatchInputs:
    """Device tensors for one forward pass (views of the runner's input buffer)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    attn: AttentionMetadata
    logits_indices: torch.Tensor  # rows whose last token gets sampled
    graph_bucket: tuple[int, int] | None = None  # (padded batch, block-table width) of its CUDA graph


class ModelRunner:
    """Runs the model over the paged KV cache on one device.

    Inputs of a step are packed into a pinned host buffer and sent in one copy (see
    :mod:`revolta_engine.worker.input_buffers`). A token sampled by the previous step that the host has
    not seen yet (asynchronous scheduling) is fed on the device from that step's sampled ids.
    """

    def __init__(self, model: Any, kv_caches: list[LayerKVCache], block_size: int,
                 device: torch.device, state_caches: list[LayerStateCache] | None = None, *,
                 max_num_tokens: int = 8192, max_num_seqs: int = 256, max_model_len: int = 8192) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.state_caches = state_caches or []
        self.block_size = block_size
        self.device = device
        self.max_model_len = max_model_len
        self.max_blocks_per_seq = -(-max_model_len // block_size)
        self.buffers = StepBuffers(max(max_num_tokens, max_num_seqs), max_num_seqs, self.max_blocks_per_seq, device)
        self.graph_runner: Any = None  # a CudaGraphRunner once decode graphs are captured
        self._sampled: torch.Tensor | None = None  # the last step's sampled ids, on the device
        self._sampled_rows: dict[str, int] = {}  # request id -> row of ``_sampled``
        self._graph_views: dict[Layout, dict[str, torch.Tensor]] = {}
        self.kept_hidden: torch.Tensor | None = None  # hidden states of execute()'s keep_rows
        self.keep_step_hidden = False  # an MTP head reads every row's hidden state after the step
        self.step_hidden: torch.Tensor | None = None  # the last step's, when kept (rows of the flattened batch)

    def reset_state_slots(self, slots: list[int], sources: list[int | None]) -> None:
        """Hybrid models: start these state slots fresh or from snapshot slots (see :func:`reset_slots`)."""
        if slots:
            reset_slots(self.state_caches, slots, sources)

    def record_sampled(self, token_ids: torch.Tensor, request_ids: list[str]) -> None:
        """Remember the device tensor of the ids just sampled, one row per request in ``request_ids``."""
        self._sampled = token_ids
        self._sampled_rows = {rid: i for i, rid in enumerate(request_ids)}

    def _graph_bucket(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]],
                      use_graphs: bool) -> tuple[int, int] | None:
        graphs = self.graph_runner
        if not use_graphs or graphs is None:
            return None
        if not graphs.can_run(len(scheduled), max(s.num_new_tokens for s in scheduled)):
            return None
        return graphs.bucket(len(scheduled)), graphs.width(max(len(t) for t in block_tables))

    def prepare(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]],
                use_graphs: bool = True) -> BatchInputs:
        """Flatten the batch's new tokens and describe where they live in the cache."""
        bs = self.block_size
        n = len(scheduled)
        num_tokens = sum(s.num_new_tokens for s in scheduled)
        graph_bucket = self._graph_bucket(scheduled, block_tables, use_graphs)
        graph_batch = graph_bucket[0] if graph_bucket is not None else None
        if graph_bucket is not None:
            layout = self.graph_runner.layout(*graph_bucket)
        else:
            num_sampled = sum(s.num_drafts + 1 for s in scheduled if s.completes)
            layout = Layout(num_tokens, n, max(1, max(len(t) for t in block_tables)), max(n, num_sampled), n)
        assert self.buffers.fits(layout), f"step of {num_tokens} tokens / {n} sequences exceeds the input buffers"
        h = host_views(self.buffers.begin(), layout)
        ids, pos, slots, bt = h["input_ids"], h["positions"], h["slot_mapping"], h["block_tables"]
        qsl, ctx, rows, feed_dst, feed_src = (h["query_start_loc"], h["context_lens"], h["logits_indices"],
                                              h["feed_dst"], h["feed_src"])
        qsl[0] = 0
        off = num_rows = num_feeds = 0
        max_ctx = 1
        for i, (s, table) in enumerate(zip(scheduled, block_tables, strict=True)):
            req = s.request
            k = s.num_new_tokens
            start, end = req.num_computed_tokens, req.num_computed_tokens + s.num_new_tokens
            known = len(req.all_token_ids)
            if k == 1:
                if start < known:
                    ids[off] = req.all_token_ids[start]
                pos[off] = start
                slots[off] = table[start // bs] * bs + start % bs
            else:
                ids[off:off + min(end, known) - start] = req.all_token_ids[start:min(end, known)]
                p = np.arange(start, end, dtype=np.int64)
                pos[off:off + k] = p
                slots[off:off + k] = np.asarray(table, dtype=np.int64)[p // bs] * bs + p % bs
            if s.num_drafts:  # speculative drafts after the known tokens
                ids[off + k - s.num_drafts:off + k] = req.spec_token_ids[:s.num_drafts]
            elif end > known:  # the last input is the token the previous step sampled for this request
                assert end == known + 1, "at most one sampled token can be in flight per request"
                ids[off + k - 1] = 0
                feed_dst[num_feeds] = off + k - 1
                feed_src[num_feeds] = self._sampled_rows[req.request_id]
                num_feeds += 1
            bt[i, :len(table)] = table
            bt[i, len(table):] = 0  # the CPU attention reads whole rows: no stale block ids
            off += k
            qsl[i + 1] = off
            ctx[i] = end
            max_ctx = max(max_ctx, end)
            if s.completes:  # the last known token's row, then one row per draft
                for j in range(s.num_drafts + 1):
                    rows[num_rows] = off - 1 - s.num_drafts + j
                    num_rows += 1
        if graph_batch is not None and graph_batch > n:
            # padding rows write their K/V nowhere (slot -1) and attend to one token of the null block
            ids[n:], pos[n:], slots[n:], ctx[n:] = 0, 0, -1, 1
            bt[n:, 0] = 0
            qsl[n + 1:] = np.arange(n + 1, graph_batch + 1)
        self.buffers.upload(layout.offsets["end"])
        v = self._views(layout, graph_batch is not None)
        if num_feeds:
            v["input_ids"].index_copy_(0, v["feed_dst"][:num_feeds],
                                       self._sampled.index_select(0, v["feed_src"][:num_feeds]))  # type: ignore[union-attr]
        attn = AttentionMetadata(
            slot_mapping=v["slot_mapping"], block_tables=v["block_tables"], context_lens=v["context_lens"],
            query_start_loc=v["query_start_loc"], max_query_len=max(s.num_new_tokens for s in scheduled),
            max_context_len=layout.width * bs if graph_bucket is not None else max_ctx,
        )
        return BatchInputs(v["input_ids"], v["positions"], attn, v["logits_indices"][:num_rows], graph_bucket)

    def _views(self, layout: Layout, cache: bool) -> dict[str, torch.Tensor]:
        if not cache:
            return self.buffers.views(layout)
        views = self._graph_views.get(layout)
        if views is None:
            views = self._graph_views[layout] = self.buffers.views(layout)
        return views

    def prepare_state(self, state_slots: list[int], snapshots: list[tuple[int, int, int]]) -> StateMetadata:
        """State slots of the batch's sequences and the ``(sequence, new tokens, slot)`` snapshots to take."""
        def tensor(data):
            return torch.tensor(data, dtype=torch.int64).to(self.device, non_blocking=True)

        seqs, lens, slots = (list(col) for col in zip(*snapshots, strict=True)) if snapshots else ([], [], [])
        return StateMetadata(tensor(state_slots), tensor(seqs), tensor(lens), tensor(slots))

    @torch.inference_mode()
    def execute(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]],
                state_slots: list[int] | None = None,
                snapshots: list[tuple[int, int, int]] | None = None,
                keep_rows: list[int] | None = None) -> torch.Tensor:
        """Run one forward pass; return float32 logits for the rows that complete their tokens.

        Nothing here waits for the device. Hybrid models also get each sequence's state slot and the
        state snapshots to take. ``keep_rows`` (prompt logprobs): the hidden states of those rows of the
        flattened batch are kept in :attr:`kept_hidden`.
        """
        state = None if state_slots is None else self.prepare_state(state_slots, snapshots or [])
        self.kept_hidden = None
        # decode graphs hold static state slots; steps that also take state snapshots run eagerly
        batch = self.prepare(scheduled, block_tables, use_graphs=not snapshots and not keep_rows)
        if batch.graph_bucket is not None:
            hidden = self.graph_runner.run(*batch.graph_bucket, None if state is None else state.state_indices)
            self.step_hidden = hidden if self.keep_step_hidden else None  # valid until the next replay
            if batch.logits_indices.shape[0] == len(scheduled):  # every row samples: rows 0..n-1 in order
                return self.model.compute_logits(hidden[:len(scheduled)])
        else:
            with forward_context(ForwardContext(batch.attn, self.kv_caches, state, self.state_caches)):
                hidden = self.model(batch.input_ids, batch.positions)
            self.step_hidden = hidden if self.keep_step_hidden else None
        if keep_rows:
            self.kept_hidden = hidden.index_select(0, torch.tensor(keep_rows, device=hidden.device))
        return self.model.compute_logits(hidden.index_select(0, batch.logits_indices))
