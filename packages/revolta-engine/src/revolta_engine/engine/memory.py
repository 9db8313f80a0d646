"""How many KV blocks fit: a fixed budget on the CPU, what ``gpu_memory_utilization`` leaves on a GPU."""

from __future__ import annotations

import logging

import torch
from torch import nn

from revolta_engine.config.engine_config import CacheConfig
from revolta_engine.worker.kv_cache import KVCacheSpec

logger = logging.getLogger(__name__)


def plan_kv_blocks(spec: KVCacheSpec, device: torch.device, cache: CacheConfig, model: nn.Module,
                   max_num_batched_tokens: int, max_model_len: int, reserved_bytes: int = 0,
                   extra_bytes_per_block: int = 0) -> tuple[int, int | None]:
    """Number of blocks to allocate, including the null block 0, and the budget measured on the GPU (None when
    the configuration gave one).

    ``reserved_bytes`` (hybrid models' recurrent state pool) come out of the same budget first;
    ``extra_bytes_per_block`` (a draft model's cache over the same blocks) is paid for each block too.
    """
    if cache.num_gpu_blocks_override:
        return int(cache.num_gpu_blocks_override) + 1, None
    budget, measured = cache.kv_cache_memory_bytes, None
    if budget is None:
        budget = measured = _gpu_budget(device, cache.gpu_memory_utilization, max_num_batched_tokens, spec,
                                        model, max_model_len)
    per_block = spec.bytes_per_block + extra_bytes_per_block
    if reserved_bytes and int(budget) - reserved_bytes < 2 * per_block:
        raise MemoryError(
            f"the recurrent state pool needs {reserved_bytes / 2**20:.0f} MiB of the {int(budget) / 2**20:.0f} "
            f"MiB cache budget, leaving too little for the KV cache; lower max_num_seqs or raise "
            f"gpu_memory_utilization / kv_cache_memory_bytes"
        )
    num_blocks = (int(budget) - reserved_bytes) // per_block
    if num_blocks < 2:
        raise MemoryError(
            f"only {budget / 2**20:.0f} MiB are left for the KV cache, less than two blocks of "
            f"{per_block / 2**20:.2f} MiB; raise gpu_memory_utilization or kv_cache_memory_bytes"
        )
    return num_blocks, measured


def _gpu_budget(device: torch.device, utilization: float, max_num_batched_tokens: int, spec: KVCacheSpec,
                model: nn.Module, max_model_len: int) -> int:
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    used_by_others = total - free - torch.cuda.memory_reserved(device)
    weights = torch.cuda.memory_allocated(device)
    activation = profile_activation_bytes(model, spec, device, min(max_num_batched_tokens, max_model_len))
    budget = int(total * utilization) - used_by_others - weights - activation
    logger.info(
        "GPU memory: %.1f GiB total, %.0f%% usable; weights %.2f GiB, peak activations %.2f GiB "
        "(profiled at %d tokens), other processes %.2f GiB -> KV cache %.2f GiB",
        total / 2**30, utilization * 100, weights / 2**30, activation / 2**30,
        min(max_num_batched_tokens, max_model_len), used_by_others / 2**30, max(budget, 0) / 2**30)
    return max(budget, 0)


@torch.inference_mode()
def profile_activation_bytes(model: nn.Module, spec: KVCacheSpec, device: torch.device, num_tokens: int) -> int:
    """Peak memory of one forward over ``num_tokens`` prompt tokens (plus logits), beyond the weights."""
    from revolta_engine.forward_context import AttentionMetadata, ForwardContext, forward_context
    from revolta_engine.worker.kv_cache import allocate_kv_cache

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    n_blocks = -(-num_tokens // spec.block_size)
    caches = allocate_kv_cache(spec, n_blocks + 1, device)
    state, state_caches = _one_state_slot(model, device)
    cache_bytes = torch.cuda.memory_allocated(device) - base

    def i32(data) -> torch.Tensor:
        return torch.tensor(data, dtype=torch.int32, device=device)

    meta = AttentionMetadata(
        slot_mapping=torch.arange(num_tokens, device=device) + spec.block_size,
        block_tables=i32([list(range(1, n_blocks + 1))]), context_lens=i32([num_tokens]),
        query_start_loc=i32([0, num_tokens]), max_query_len=num_tokens, max_context_len=num_tokens)
    ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    with forward_context(ForwardContext(meta, caches, state, state_caches)):
        hidden = model(ids, torch.arange(num_tokens, device=device))
    model.compute_logits(hidden[-256:])  # type: ignore[operator]
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base - cache_bytes
    del caches, hidden, state_caches
    torch.cuda.empty_cache()
    return int(peak)


def _one_state_slot(model: nn.Module, device: torch.device):
    """Hybrid models: state metadata and a one-slot state pool for the profiling pass (else none)."""
    if not hasattr(model, "state_cache_spec"):
        return None, []
    from revolta_engine.forward_context import StateMetadata
    from revolta_engine.worker.state_cache import allocate_state_cache

    caches = allocate_state_cache(model.state_cache_spec(), 1, device)  # type: ignore[operator]
    none = torch.zeros(0, dtype=torch.int64, device=device)
    return StateMetadata(torch.zeros(1, dtype=torch.int64, device=device), none, none, none), caches
