"""What every tensor-parallel rank builds the same way: its shard of the model, its KV cache, its runner.

Rank 0 (the engine) and the worker processes call the same functions in the same order, so the collectives inside
them (the profiling pass on a GPU, the agreement on the number of KV blocks) meet.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from revolta_engine.config import EngineArgs, EngineConfig
from revolta_engine.engine.cache_setup import EngineCaches, allocate_caches
from revolta_engine.engine.model_builder import load_model
from revolta_engine.layers.activation_quant import set_activation_quant
from revolta_engine.parallel.communication import all_ranks_min
from revolta_engine.parallel.state import TensorParallelLayout, tensor_parallel_layout
from revolta_engine.worker.kv_cache import KVCacheSpec
from revolta_engine.worker.model_runner import ModelRunner


@dataclasses.dataclass
class ShardSettings:
    """The options rank 0 resolved, as every rank builds with them (picklable: sent to the workers)."""

    args: EngineArgs
    config: EngineConfig
    model_path: str
    dtype: torch.dtype
    max_model_len: int
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    enable_prefix_caching: bool
    kv_cache_dtype: torch.dtype
    activation_quant: str
    tensor_parallel_size: int
    device: str = "cpu"  # rank 0's device as resolved ("cuda" or "cpu"); rank r > 0 takes GPU r
    draft_kv_bytes_per_block: int = 0  # a draft model's cache over the same blocks (speculative decoding)
    scratch_state_slots: int = 0  # hybrid models with speculative decoding: a state per draft position
    init_method: str = ""  # where the ranks meet (tcp://host:port), set by the launcher


@dataclasses.dataclass
class ShardRuntime:
    """One rank's model, caches and runner."""

    model: Any
    spec: KVCacheSpec
    caches: EngineCaches
    runner: ModelRunner


def shard_device(device: torch.device, rank: int) -> torch.device:
    """The device of ``rank``: GPU ``rank`` (rank 0 keeps the engine's device), or the CPU."""
    if device.type == "cuda" and rank > 0:
        return torch.device("cuda", rank)
    return device


def load_shard_model(hf_config: Any, weights: Any, settings: ShardSettings, device: torch.device, rank: int) -> Any:
    """Build this rank's shard of the model and fill it (random weights for ``load_format="dummy"``)."""
    layout = TensorParallelLayout(rank, settings.tensor_parallel_size)
    with tensor_parallel_layout(layout):
        model = load_model(hf_config, weights, settings.max_model_len, settings.dtype, device,
                           settings.args.seed + rank)
    set_activation_quant(model, settings.activation_quant)
    return model


def build_shard_runtime(model: Any, settings: ShardSettings, device: torch.device) -> ShardRuntime:
    """Allocate this rank's KV cache (as many blocks as the fullest rank holds) and make its runner."""
    num_layers, num_kv_heads, head_dim = model.kv_cache_shape()
    spec = KVCacheSpec(num_layers, num_kv_heads, head_dim, settings.block_size, settings.kv_cache_dtype)
    agree = all_ranks_min if settings.tensor_parallel_size > 1 else None
    caches = allocate_caches(model, spec, device, settings.config.cache, settings.max_num_seqs,
                             settings.enable_prefix_caching, settings.max_num_batched_tokens, settings.max_model_len,
                             agree=agree,
                             extra_bytes_per_block=settings.draft_kv_bytes_per_block,
                             scratch_state_slots=settings.scratch_state_slots)
    runner = ModelRunner(model, caches.kv_caches, settings.block_size, device, caches.state_caches,
                         max_num_tokens=settings.max_num_batched_tokens, max_num_seqs=settings.max_num_seqs,
                         max_model_len=settings.max_model_len)
    return ShardRuntime(model, spec, caches, runner)
