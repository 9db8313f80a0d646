"""CUDA graphs for decode steps: captured once per batch-size bucket, replayed with padded inputs.

Buckets are captured largest first so every graph shares one memory pool. Inputs are copied into
static buffers; padding rows write their K/V nowhere (slot -1) and attend to one token of the null
block, and their outputs are discarded. Hybrid models also get a static buffer of state slots: padding
rows use a spare ``pad_slot`` of the state pool that no request owns.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from revolta_engine.forward_context import (
    AttentionMetadata,
    ForwardContext,
    LayerKVCache,
    LayerStateCache,
    StateMetadata,
    forward_context,
)

logger = logging.getLogger(__name__)


def default_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to ``max_num_seqs`` (vLLM's shape of buckets)."""
    sizes = [b for b in (1, 2, 4) if b <= max_num_seqs]
    sizes += list(range(8, max_num_seqs + 1, 8))
    if max_num_seqs not in sizes:
        sizes.append(max_num_seqs)
    return sorted(set(sizes))


class CudaGraphRunner:
    """Owns the static input buffers and one captured graph per bucket of decode batch sizes."""

    def __init__(self, model: Any, kv_caches: list[LayerKVCache], max_num_seqs: int, max_blocks_per_seq: int,
                 max_model_len: int, device: torch.device, buckets: list[int] | None = None,
                 state_caches: list[LayerStateCache] | None = None, pad_slot: int = -1) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.device = device
        self.buckets = buckets or default_buckets(max_num_seqs)
        self.max_bs = self.buckets[-1]
        self.max_model_len = max_model_len
        n = self.max_bs
        self.input_ids = torch.zeros(n, dtype=torch.int64, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.slot_mapping = torch.full((n,), -1, dtype=torch.int64, device=device)
        self.block_tables = torch.zeros((n, max_blocks_per_seq), dtype=torch.int32, device=device)
        self.context_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.query_start_loc = torch.arange(n + 1, dtype=torch.int32, device=device)
        self.state_caches = state_caches or []
        self.pad_slot = pad_slot
        self.state_indices = torch.full((n,), pad_slot, dtype=torch.int64, device=device)
        self.no_snapshots = torch.zeros(0, dtype=torch.int64, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.pool: Any = None

    def _metadata(self, bs: int) -> AttentionMetadata:
        return AttentionMetadata(self.slot_mapping[:bs], self.block_tables[:bs], self.context_lens[:bs],
                                 self.query_start_loc[:bs + 1], 1, self.max_model_len)

    def _state(self, bs: int) -> StateMetadata | None:
        if not self.state_caches:
            return None
        empty = self.no_snapshots
        return StateMetadata(self.state_indices[:bs], empty, empty, empty)

    def _forward(self, bs: int) -> torch.Tensor:
        ctx = ForwardContext(self._metadata(bs), self.kv_caches, self._state(bs), self.state_caches)
        with forward_context(ctx):
            return self.model(self.input_ids[:bs], self.positions[:bs])

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every bucket, largest first, into one shared memory pool."""
        start = time.perf_counter()
        before = torch.cuda.mem_get_info(self.device)[0]
        for bs in sorted(self.buckets, reverse=True):
            self._forward(bs)  # warm-up: lazy inits and autotuning happen outside the graph
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = self._forward(bs)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[bs] = graph
            self.outputs[bs] = out
        torch.cuda.synchronize(self.device)
        used = before - torch.cuda.mem_get_info(self.device)[0]
        logger.info("Captured CUDA graphs for %d decode batch sizes (1..%d) in %.1f s using %.0f MiB",
                    len(self.buckets), self.max_bs, time.perf_counter() - start, used / 2**20)

    def can_run(self, num_seqs: int, max_query_len: int) -> bool:
        return max_query_len == 1 and num_seqs <= self.max_bs and bool(self.graphs)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
            state_indices: torch.Tensor | None = None) -> torch.Tensor:
        """Replay the smallest graph that fits; returns hidden states of the real rows.

        ``state_indices``: the sequences' state slots (hybrid models; decode steps without snapshots).
        """
        n = input_ids.shape[0]
        bs = next(b for b in self.buckets if b >= n)
        self.input_ids[:n].copy_(input_ids, non_blocking=True)
        self.positions[:n].copy_(positions, non_blocking=True)
        self.slot_mapping[:n].copy_(attn.slot_mapping, non_blocking=True)
        width = attn.block_tables.shape[1]
        self.block_tables[:n, :width].copy_(attn.block_tables, non_blocking=True)
        self.context_lens[:n].copy_(attn.context_lens, non_blocking=True)
        if state_indices is not None:
            self.state_indices[:n].copy_(state_indices, non_blocking=True)
        if bs > n:
            self.slot_mapping[n:bs].fill_(-1)
            self.context_lens[n:bs].fill_(1)
            self.block_tables[n:bs].zero_()
            self.state_indices[n:bs].fill_(self.pad_slot)
        self.graphs[bs].replay()
        return self.outputs[bs][:n]
