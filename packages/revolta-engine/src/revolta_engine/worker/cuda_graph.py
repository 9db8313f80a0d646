"""CUDA graphs for decode steps: captured once per (batch size, context, query length) bucket, replayed with
padded inputs.

Graphs are captured largest first so they all share one memory pool. A graph reads its inputs straight
from the runner's device input buffer at the offsets of its bucket's layout (the runner packs a graphed
step in that layout), so a replay needs no copies. Padding rows write their K/V nowhere (slot -1) and
attend to one token of the null block; their outputs are discarded. Hybrid models also get a static
buffer of state slots: padding rows use a spare ``pad_slot`` of the state pool that no request owns.

The context bucket is the width of the block table. The decode attention plans its context splits
and picks its kernel variant from that width when the graph is captured (the host cannot see the real
context lengths then), so a graph sized for the longest possible context would split short contexts
into mostly empty pieces. Widths doubling from 64 blocks (1K tokens) up to the maximum
(``context_buckets``) keep the plan within about 2x of the batch's real longest context. At batch 1-2
the vector decode attention's 256-thread variant is only chosen where the table's keys fit one wave of
its splits, which a 1-2K-token context in a 4K-token table (the next width of a x4 ladder) missed.

Speculative decoding adds verification buckets: every sequence of the batch feeds ``1 + k`` query tokens (the
newest token and ``k`` drafts). A sequence with fewer drafts (none, or fewer near its ``max_tokens``) is padded
inside its own row: the padding tokens write their K/V nowhere and their outputs are discarded, and the context
length counts them so the real tokens attend exactly to what precedes them. Hybrid models snapshot the recurrent
state after every position of every row into fixed scratch slots (static tensors of the graph); the engine copies
back the one after the last kept token (:mod:`revolta_engine.engine.recurrent_state`).
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
from revolta_engine.worker.input_buffers import Layout, StepBuffers

logger = logging.getLogger(__name__)

MAX_DECODE_QUERY_LEN = 8  # query tokens a sequence the paged decode attention takes (more: the prefill kernel)
VERIFY_GRAPH_MAX_TOKENS = 512  # verification steps up to this many tokens are graphed (vLLM captures up to 512)


def context_buckets(max_blocks: int, smallest: int = 64, factor: int = 2) -> list[int]:
    """Block-table widths to capture: ``smallest`` blocks, then x``factor`` each, and ``max_blocks``.

    A rung within 1.25x of ``max_blocks`` is left out (512 beside 516 would double the graphs for a 1%
    narrower table), so a context's table is at most 2.5x its blocks at ``factor`` 2.
    """
    widths = []
    w = smallest
    while 5 * w <= 4 * max_blocks:
        widths.append(w)
        w *= factor
    return widths + [max_blocks]


def default_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to ``max_num_seqs`` (vLLM's shape of buckets)."""
    sizes = [b for b in (1, 2, 4) if b <= max_num_seqs]
    sizes += list(range(8, max_num_seqs + 1, 8))
    if max_num_seqs not in sizes:
        sizes.append(max_num_seqs)
    return sorted(set(sizes))


def verify_buckets(buckets: list[int], query_len: int, max_tokens: int) -> list[int]:
    """The batch sizes of ``buckets`` whose verification steps (``query_len`` tokens a sequence) stay within
    ``max_tokens`` tokens: larger verification batches are compute-bound and run eagerly."""
    return [b for b in buckets if b * query_len <= max(max_tokens, query_len)]


class CudaGraphRunner:
    """One captured graph (inputs -> final hidden states) per bucket of decode batch size, context and query
    length (1, or ``1 + k`` for speculative verification with ``verify_buckets``)."""

    def __init__(self, model: Any, kv_caches: list[LayerKVCache], buffers: StepBuffers, max_num_seqs: int,
                 max_model_len: int, device: torch.device, buckets: list[int] | None = None,
                 state_caches: list[LayerStateCache] | None = None, pad_slot: int = -1,
                 verify: tuple[int, list[int]] | None = None, scratch_slot: int = -1) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.buffers = buffers
        self.device = device
        self.buckets = buckets if buckets is not None else default_buckets(min(max_num_seqs, buffers.max_seqs))
        self.max_bs = self.buckets[-1]
        self.max_model_len = max_model_len
        # query length -> its batch buckets: plain decode, then speculative verification (``verify``)
        self.buckets_of: dict[int, list[int]] = {1: self.buckets}
        if verify is not None and verify[1]:
            self.buckets_of[verify[0]] = verify[1]
        self._bucket_of = {q: [next(b for b in bks if b >= n) for n in range(bks[-1] + 1)]
                           for q, bks in self.buckets_of.items()}
        self.widths = context_buckets(buffers.max_width)
        self.block_size = kv_caches[0].key.shape[2] if kv_caches else 16
        self.state_caches = state_caches or []
        self.pad_slot = pad_slot
        self.scratch_slot = scratch_slot  # hybrid verification: row i's state after position j at i * (q-1) + j-1
        max_rows = max(bks[-1] for bks in self.buckets_of.values())
        self.state_indices = torch.full((max_rows,), pad_slot, dtype=torch.int64, device=device)
        self.no_snapshots = torch.zeros(0, dtype=torch.int64, device=device)
        self._snapshots: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.last_bucket: tuple[int, int, int] | None = None  # the (batch, width, query) replayed last (benchmarks)
        self.graphs: dict[tuple[int, int, int], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[int, int, int], torch.Tensor] = {}
        self.pool: Any = None

    @property
    def query_lens(self) -> list[int]:
        """The query lengths per sequence that have graphs (1, and ``1 + k`` with speculative decoding)."""
        return sorted(self.buckets_of)

    def layout(self, bs: int, width: int, q: int = 1) -> Layout:
        """Where a graphed step of padded batch ``bs``, block tables ``width`` wide and ``q`` query tokens per
        sequence keeps its inputs."""
        return Layout(bs * q, bs, width, bs * q, bs)

    def _state(self, bs: int, q: int) -> StateMetadata | None:
        if not self.state_caches:
            return None
        if q == 1:
            empty = self.no_snapshots
            return StateMetadata(self.state_indices[:bs], empty, empty, empty)
        snaps = self._snapshots.get((bs, q))
        if snaps is None:  # after positions 1..q-1 of every row, into its scratch slots
            seq = torch.arange(bs, device=self.device).repeat_interleave(q - 1)
            length = torch.arange(1, q, device=self.device).repeat(bs)
            snaps = self._snapshots[bs, q] = (seq, length, self.scratch_slot + seq * (q - 1) + length - 1)
        return StateMetadata(self.state_indices[:bs], *snaps)

    def _forward(self, bs: int, width: int, q: int) -> torch.Tensor:
        v = self.buffers.views(self.layout(bs, width, q))
        meta = AttentionMetadata(v["slot_mapping"], v["block_tables"], v["context_lens"], v["query_start_loc"],
                                 q, width * self.block_size)
        with forward_context(ForwardContext(meta, self.kv_caches, self._state(bs, q), self.state_caches)):
            return self.model(v["input_ids"], v["positions"])

    def _fill_padding(self, bs: int, width: int, q: int) -> None:
        """Inputs of a batch made only of padding rows, for warm-up and capture."""
        v = self.buffers.views(self.layout(bs, width, q))
        v["input_ids"].zero_()
        v["positions"].zero_()
        v["slot_mapping"].fill_(-1)
        v["context_lens"].fill_(q)
        v["block_tables"].zero_()
        v["query_start_loc"].copy_(torch.arange(0, bs * q + 1, q, dtype=torch.int32, device=self.device))

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every bucket, largest first, into one shared memory pool."""
        start = time.perf_counter()
        # torch.cuda.graph() empties the allocator's cache on entry; empty it first so that the free memory
        # measured after the capture is not raised by cached blocks it released (a negative "used" figure)
        torch.cuda.empty_cache()
        before = torch.cuda.mem_get_info(self.device)[0]
        # largest steps first (tokens = batch x query length), so later graphs reuse the pool's blocks
        keys = sorted(((bs, width, q) for q, bks in self.buckets_of.items() for bs in bks for width in self.widths),
                      key=lambda k: (k[0] * k[2], k[1]), reverse=True)
        for bs, width, q in keys:
            self._fill_padding(bs, width, q)
            self._forward(bs, width, q)  # warm-up: lazy inits and autotuning happen outside the graph
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = self._forward(bs, width, q)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[bs, width, q] = graph
            self.outputs[bs, width, q] = out
        torch.cuda.synchronize(self.device)
        used = before - torch.cuda.mem_get_info(self.device)[0]
        verify = "".join(f" and {len(bks)} verification batch sizes (1..{bks[-1]}) of {q} tokens a sequence"
                         for q, bks in self.buckets_of.items() if q > 1)
        logger.info("Captured CUDA graphs for %d decode batch sizes (1..%d)%s x %d context sizes (up to %d tokens) "
                    "in %.1f s using %.0f MiB", len(self.buckets), self.max_bs, verify, len(self.widths),
                    self.widths[-1] * self.block_size, time.perf_counter() - start, used / 2**20)

    def query_len(self, num_seqs: int, max_query_len: int) -> int | None:
        """The query length of the graphs that can run ``num_seqs`` sequences of at most ``max_query_len`` new
        tokens each (the smallest that holds them), or None: the step runs eagerly."""
        if not self.graphs:
            return None
        q = next((q for q in self.query_lens if q >= max_query_len), None)
        if q is None or num_seqs > self.buckets_of[q][-1]:
            return None
        return q

    def bucket(self, num_seqs: int, q: int = 1) -> int:
        """The smallest captured batch size of query length ``q`` that holds ``num_seqs`` rows."""
        return self._bucket_of[q][num_seqs]

    def width(self, num_blocks: int) -> int | None:
        """The narrowest captured block-table width that holds ``num_blocks`` blocks (None: none does)."""
        return next((w for w in self.widths if w >= num_blocks), None)

    def run(self, bs: int, width: int, q: int = 1, state_indices: torch.Tensor | None = None) -> torch.Tensor:
        """Replay a bucket (inputs already in the device buffer); hidden states of all ``bs * q`` rows.

        ``state_indices``: the sequences' state slots (hybrid models; decode steps without snapshots).
        The tensor returned is the graph's static output: the next replay overwrites it.
        """
        if state_indices is not None:
            n = state_indices.shape[0]
            self.state_indices[:n].copy_(state_indices, non_blocking=True)
            self.state_indices[n:bs].fill_(self.pad_slot)
        self.last_bucket = bs, width, q
        self.graphs[bs, width, q].replay()
        return self.outputs[bs, width, q]


def capture_decode_graphs(model: Any, kv_caches: list, buffers: StepBuffers, max_seqs: int, max_model_len: int,
                          device: torch.device, dtype: torch.dtype, *, enforce_eager: bool = False,
                          state_caches: list | None = None, pad_slot: int = -1, num_drafts: int = 0,
                          scratch_slot: int = -1) -> CudaGraphRunner | None:
    """The decode CUDA graphs of ``model``, or None (eagerly run) when eager mode is asked for or the ops
    cannot be captured: a model whose capture fails keeps serving, with a warning that says why.
    ``num_drafts``: speculative decoding's drafts per step (verification graphs of ``1 + num_drafts`` tokens a
    sequence, as far as the decode attention takes them); ``scratch_slot``: hybrid models' first scratch state."""
    import revolta_kernels

    if enforce_eager:
        logger.info("CUDA graphs are off (enforce_eager)")
        return None
    if not revolta_kernels.native_available() or dtype == torch.float32:
        logger.warning("CUDA graphs are off: they need the native kernels and fp16/bf16 (%s; dtype %s)",
                       revolta_kernels.native_status(), dtype)
        return None
    from revolta_engine.layers.moe import MOE_FUSED_MAX_TOKENS, SparseMoeBlock
    from revolta_engine.layers.quant_moe import QuantizedExperts

    if any(isinstance(m, QuantizedExperts) and not m.can_run_grouped for m in model.modules()):
        logger.warning("CUDA graphs are off: the quantized experts of this mixture-of-experts checkpoint run one "
                       "expert at a time, picked on the host (act-order experts); decode runs eagerly")
        return None
    buckets = default_buckets(max_seqs)
    max_verify_tokens = min(VERIFY_GRAPH_MAX_TOKENS, buffers.max_tokens)
    if any(isinstance(m, SparseMoeBlock) for m in model.modules()):
        # larger batches take the sorted-experts path, which synchronises with the host: they run eagerly
        buckets = [b for b in buckets if b <= MOE_FUSED_MAX_TOKENS]
        max_verify_tokens = min(max_verify_tokens, MOE_FUSED_MAX_TOKENS)
    q = 1 + num_drafts
    verify = None
    if num_drafts and q <= MAX_DECODE_QUERY_LEN:
        verify = q, verify_buckets(buckets, q, max_verify_tokens)
    elif num_drafts:
        logger.info("Verification steps of %d tokens a sequence run eagerly (graphs take at most %d)", q,
                    MAX_DECODE_QUERY_LEN)
    runner = CudaGraphRunner(model, kv_caches, buffers, max_seqs, max_model_len, device, buckets=buckets,
                             state_caches=state_caches, pad_slot=pad_slot, verify=verify, scratch_slot=scratch_slot)
    try:
        runner.capture()
    except RuntimeError as exc:  # an op of this model that cannot be captured: keep serving, eagerly
        logger.warning("CUDA graphs are off: capturing the decode step failed (%s); running eagerly", exc)
        torch.cuda.synchronize(device)
        return None
    return runner
