"""The MTP head's KV cache and runner, set up the same way on rank 0 (:mod:`~revolta_engine.spec_decode.mtp`) and
on the tensor-parallel workers (:mod:`~revolta_engine.spec_decode.mtp_parallel`), and on one GPU the head's CUDA
graphs: its input besides the tokens, the target's hidden states, is read from a static buffer that each pass
fills at the rows its graph (or eager pass) reads (:class:`StaticHiddenHead`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from revolta_engine.models.hybrid_mtp import HybridMTP
from revolta_engine.worker.kv_cache import KVCacheSpec, allocate_kv_cache
from revolta_engine.worker.model_runner import ModelRunner


def head_kv_spec(head: HybridMTP, block_size: int, dtype: torch.dtype) -> KVCacheSpec:
    """The layout of the head's own paged KV cache (in the model's dtype)."""
    layers, heads, head_dim = head.kv_cache_shape()
    return KVCacheSpec(layers, heads, head_dim, block_size, dtype)


def attach_head(head: HybridMTP, target_runner: ModelRunner, spec: KVCacheSpec, num_blocks: int,
                device: torch.device, *, max_num_batched_tokens: int, max_num_seqs: int,
                max_model_len: int) -> ModelRunner:
    """Give the head the target's embedding and LM head, have the target's runner keep each step's hidden states,
    and return the head's runner over its own cache of ``num_blocks`` blocks (the target's block ids)."""
    head.attach(target_runner.model)
    target_runner.keep_step_hidden = True
    return ModelRunner(head, allocate_kv_cache(spec, num_blocks, device), spec.block_size, device,
                       max_num_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, max_model_len=max_model_len)


class StaticHiddenHead(nn.Module):
    """The head reading the target's hidden states from one static buffer (so CUDA graphs can capture it).

    :meth:`place` puts a pass's hidden states (one row per entry, in the flattened batch's order) where that
    pass reads them: rows 0.. for an eager pass or a decode graph, the real tokens' rows of a padded
    verification graph."""

    def __init__(self, head: HybridMTP, max_tokens: int, hidden_size: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__()
        self.head = head
        self.hidden = torch.zeros(max_tokens, hidden_size, dtype=dtype, device=device)

    def place(self, target_hidden: torch.Tensor, batch: Any) -> None:
        """Put ``target_hidden`` at the rows the pass of ``batch`` (:class:`BatchInputs`) reads."""
        rows = target_hidden.to(self.hidden.dtype)
        if batch.hidden_index is not None:
            self.hidden.index_copy_(0, batch.hidden_index, rows)
        else:
            self.hidden[:rows.shape[0]].copy_(rows)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.head.target_hidden = self.hidden[:input_ids.shape[0]]
        try:
            return self.head(input_ids, positions)
        finally:
            self.head.target_hidden = None

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's LM head."""
        return self.head.compute_logits(hidden)


def capture_head_graphs(head: HybridMTP, runner: ModelRunner, hidden_size: int, max_num_seqs: int,
                        max_model_len: int, dtype: torch.dtype, num_drafts: int,
                        enforce_eager: bool) -> StaticHiddenHead:
    """Run the head through a :class:`StaticHiddenHead` and capture its graphs: decode graphs for the chained
    drafts, verification-sized ones for the catch-up on a step's kept tokens. Returns the wrapped head (its eager
    passes, where capturing is off or failed, read the same buffer)."""
    from revolta_engine.worker.cuda_graph import capture_decode_graphs

    wrapped = StaticHiddenHead(head, runner.buffers.max_tokens, hidden_size, dtype, runner.device)
    runner.model = wrapped
    runner.keep_step_hidden = True  # the passes' output hidden states chain the drafts
    runner.graph_runner = capture_decode_graphs(wrapped, runner.kv_caches, runner.buffers, max_num_seqs,
                                                max_model_len, runner.device, dtype, enforce_eager=enforce_eager,
                                                num_drafts=num_drafts)
    return wrapped
