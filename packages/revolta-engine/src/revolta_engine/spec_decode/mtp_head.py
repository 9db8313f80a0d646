"""The MTP head's KV cache and runner, set up the same way on rank 0 (:mod:`~revolta_engine.spec_decode.mtp`) and
on the tensor-parallel workers (:mod:`~revolta_engine.spec_decode.mtp_parallel`)."""

from __future__ import annotations

import torch

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
