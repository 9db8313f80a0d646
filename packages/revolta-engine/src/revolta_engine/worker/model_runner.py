"""Prepares a scheduled batch's inputs and attention metadata and runs the model."""

from __future__ import annotations

from collections.abc import Callable
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
    graph_bucket: tuple[int, int, int] | None = None  # (padded batch, table width, query length) of its graph
    hidden_index: torch.Tensor | None = None  # graphs of several query tokens: the real tokens' rows, in order


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
        self.graph_query_len = 0  # query tokens a sequence of the graph the last step replayed (0: eager)

    def reset_state_slots(self, slots: list[int], sources: list[int | None]) -> None:
        """Hybrid models: start these state slots fresh or from snapshot slots (see :func:`reset_slots`)."""
        if slots:
            reset_slots(self.state_caches, slots, sources)

    def record_sampled(self, token_ids: torch.Tensor, request_ids: list[str]) -> None:
        """Remember the device tensor of the ids just sampled, one row per request in ``request_ids``."""
        self._sampled = token_ids
        self._sampled_rows = {rid: i for i, rid in enumerate(request_ids)}

    def _graph_bucket(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]],
                      use_graphs: bool) -> tuple[int, int, int] | None:
        """``(padded batch, block-table width, query length)`` of the graph that runs this step, or None."""
        graphs = self.graph_runner
        if not use_graphs or graphs is None:
            return None
        q = graphs.query_len(len(scheduled), max(s.num_new_tokens for s in scheduled))
        if q is None:
            return None
        blocks = max(len(t) for t in block_tables)
        if q > 1:
            if not all(s.completes for s in scheduled):  # padding a prompt chunk would advance a hybrid's state
                return None
            # padding tokens are counted in the context: the table must be as wide as the padded context
            blocks = max(blocks, max(-(-(s.request.num_computed_tokens + q) // self.block_size) for s in scheduled))
        width = graphs.width(blocks)
        if width is None:
            return None
        return graphs.bucket(len(scheduled), q), width, q

    def prepare(self, scheduled: list[ScheduledRequest], block_tables: list[list[int]],
                use_graphs: bool = True) -> BatchInputs:
        """Flatten the batch's new tokens and describe where they live in the cache.

        In a graph of query length ``q`` every sequence owns ``q`` rows: its new tokens, then padding (no K/V
        written, counted in the context length so the real tokens attend exactly to what precedes them)."""
        bs = self.block_size
        n = len(scheduled)
        num_tokens = sum(s.num_new_tokens for s in scheduled)
        graph_bucket = self._graph_bucket(scheduled, block_tables, use_graphs)
        graph_batch, q = (graph_bucket[0], graph_bucket[2]) if graph_bucket is not None else (None, 0)
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
        hidden_rows = h["hidden_rows"] if q > 1 else None
        qsl[0] = 0
        off = num_rows = num_feeds = compact = 0
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
            if q > k:  # padding rows of this sequence inside its graph row
                ids[off + k:off + q], pos[off + k:off + q], slots[off + k:off + q] = 0, end - 1, -1
            if hidden_rows is not None:  # where the flattened batch's rows lie among the graph's
                hidden_rows[compact:compact + k] = np.arange(off, off + k)
                compact += k
            if s.completes:  # the last known token's row, then one row per draft
                for j in range(s.num_drafts + 1):
                    rows[num_rows] = off + k - 1 - s.num_drafts + j
                    num_rows += 1
            span = q or k  # the rows this sequence owns: q in a graph (its tokens, then padding)
            off += span
            qsl[i + 1] = off
            ctx[i] = end + span - k
            max_ctx = max(max_ctx, ctx[i])
        if graph_batch is not None and graph_batch > n:
            # padding sequences write their K/V nowhere (slot -1) and attend to the null block
            ids[n * q:], pos[n * q:], slots[n * q:], ctx[n:] = 0, 0, -1, q
            bt[n:, 0] = 0
            qsl[n + 1:] = np.arange(n + 1, graph_batch + 1) * q
        self.buffers.upload(layout.offsets["end"])
        v = self._views(layout, graph_batch is not None)
        if num_feeds:
            v["input_ids"].index_copy_(0, v["feed_dst"][:num_feeds],
                                       self._sampled.index_select(0, v["feed_src"][:num_feeds]))  # type: ignore[union-attr]
        attn = AttentionMetadata(
            slot_mapping=v["slot_mapping"], block_tables=v["block_tables"], context_lens=v["context_lens"],
            query_start_loc=v["query_start_loc"], max_query_len=q or max(s.num_new_tokens for s in scheduled),
            max_context_len=layout.width * bs if graph_bucket is not None else max_ctx,
        )
        hidden_index = v["hidden_rows"][:num_tokens] if q > 1 else None
        return BatchInputs(v["input_ids"], v["positions"], attn, v["logits_indices"][:num_rows], graph_bucket,
                           hidden_index)

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
                keep_rows: list[int] | None = None,
                draft_snapshots: list[tuple[int, int, int]] | None = None,
                before_forward: Callable[[BatchInputs], None] | None = None) -> torch.Tensor:
        """Run one forward pass; return float32 logits for the rows that complete their tokens.

        Nothing here waits for the device. Hybrid models also get each sequence's state slot and the
        state snapshots to take: ``snapshots`` (block boundaries, for the prefix cache) and ``draft_snapshots``
        (after each verified position; verification graphs take them into the same scratch slots themselves).
        ``keep_rows`` (prompt logprobs): the hidden states of those rows of the flattened batch are kept in
        :attr:`kept_hidden`. :attr:`graph_query_len` tells the query length of the graph that ran (0: eager).
        ``before_forward``: called with the step's inputs once they are laid out, before the pass runs (a model
        with inputs of its own puts them in place: see :mod:`revolta_engine.spec_decode.mtp_head`).
        """
        self.kept_hidden = None
        # decode graphs hold static state slots; steps that also take block-boundary snapshots run eagerly
        batch = self.prepare(scheduled, block_tables, use_graphs=not snapshots and not keep_rows)
        self.graph_query_len = batch.graph_bucket[2] if batch.graph_bucket is not None else 0
        snaps = (snapshots or []) + (draft_snapshots or [] if batch.graph_bucket is None else [])
        state = None if state_slots is None else self.prepare_state(state_slots, snaps)
        if before_forward is not None:
            before_forward(batch)
        if batch.graph_bucket is not None:
            hidden = self.graph_runner.run(*batch.graph_bucket, None if state is None else state.state_indices)
            if batch.hidden_index is None:
                self.step_hidden = hidden if self.keep_step_hidden else None  # valid until the next replay
                if batch.logits_indices.shape[0] == len(scheduled):  # every row samples: rows 0..n-1 in order
                    return self.model.compute_logits(hidden[:len(scheduled)])
            else:
                self.step_hidden = hidden.index_select(0, batch.hidden_index) if self.keep_step_hidden else None
        else:
            with forward_context(ForwardContext(batch.attn, self.kv_caches, state, self.state_caches)):
                hidden = self.model(batch.input_ids, batch.positions)
            self.step_hidden = hidden if self.keep_step_hidden else None
        if keep_rows:
            self.kept_hidden = hidden.index_select(0, torch.tensor(keep_rows, device=hidden.device))
        return self.model.compute_logits(hidden.index_select(0, batch.logits_indices))
