"""CUDA graphs for decode steps: captured once per batch-size bucket, replayed with padded inputs.

Buckets are captured largest first so every graph shares one memory pool. A graph reads its inputs
straight from the runner's device input buffer at the offsets of its padded batch size (the runner
packs a graphed step in that layout), and ends with the logits of every row, so a replay is one launch.
Padding rows write their K/V nowhere (slot -1) and attend to one token of the null block; their outputs
are discarded.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from revolta_engine.forward_context import AttentionMetadata, ForwardContext, LayerKVCache, forward_context
from revolta_engine.worker.input_buffers import Layout, StepBuffers

logger = logging.getLogger(__name__)


def default_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to ``max_num_seqs`` (vLLM's shape of buckets)."""
    sizes = [b for b in (1, 2, 4) if b <= max_num_seqs]
    sizes += list(range(8, max_num_seqs + 1, 8))
    if max_num_seqs not in sizes:
        sizes.append(max_num_seqs)
    return sorted(set(sizes))


class CudaGraphRunner:
    """One captured graph (inputs -> logits) per bucket of decode batch sizes."""

    def __init__(self, model: Any, kv_caches: list[LayerKVCache], buffers: StepBuffers, max_num_seqs: int,
                 max_model_len: int, device: torch.device, buckets: list[int] | None = None) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.buffers = buffers
        self.device = device
        self.buckets = buckets or default_buckets(min(max_num_seqs, buffers.max_seqs))
        self.max_bs = self.buckets[-1]
        self.max_model_len = max_model_len
        self._bucket_of = [next(b for b in self.buckets if b >= n) for n in range(self.max_bs + 1)]
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.pool: Any = None

    def layout(self, bs: int) -> Layout:
        """Where a graphed step of padded batch ``bs`` keeps its inputs in the device buffer."""
        return Layout(bs, bs, self.buffers.max_width, bs, bs)

    def _forward(self, bs: int) -> torch.Tensor:
        v = self.buffers.views(self.layout(bs))
        meta = AttentionMetadata(v["slot_mapping"], v["block_tables"], v["context_lens"], v["query_start_loc"],
                                 1, self.max_model_len)
        with forward_context(ForwardContext(meta, self.kv_caches)):
            hidden = self.model(v["input_ids"], v["positions"])
        return self.model.compute_logits(hidden)

    def _fill_padding(self, bs: int) -> None:
        """Inputs of a batch made only of padding rows, for warm-up and capture."""
        v = self.buffers.views(self.layout(bs))
        v["input_ids"].zero_()
        v["positions"].zero_()
        v["slot_mapping"].fill_(-1)
        v["context_lens"].fill_(1)
        v["block_tables"].zero_()
        v["query_start_loc"].copy_(torch.arange(bs + 1, dtype=torch.int32, device=self.device))

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every bucket, largest first, into one shared memory pool."""
        start = time.perf_counter()
        before = torch.cuda.mem_get_info(self.device)[0]
        for bs in sorted(self.buckets, reverse=True):
            self._fill_padding(bs)
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

    def bucket(self, num_seqs: int) -> int:
        """The smallest captured batch size that holds ``num_seqs`` rows."""
        return self._bucket_of[num_seqs]

    def run(self, bs: int) -> torch.Tensor:
        """Replay bucket ``bs`` (inputs already in the device buffer); float32 logits of all ``bs`` rows.

        The tensor is the graph's static output: the next replay overwrites it.
        """
        self.graphs[bs].replay()
        return self.outputs[bs]
