"""How many KV blocks fit: a fixed budget on the CPU, what ``gpu_memory_utilization`` leaves on a GPU."""

from __future__ import annotations

import logging

import torch
from torch import nn

from revolta_engine.config import ConfigResolver
from revolta_engine.worker.kv_cache import KVCacheSpec

logger = logging.getLogger(__name__)

CPU_KV_CACHE_BYTES = 2 * 2**30  # default KV budget on the CPU


def plan_kv_blocks(spec: KVCacheSpec, device: torch.device, cfg: ConfigResolver, model: nn.Module,
                   max_num_batched_tokens: int) -> int:
    """Number of blocks to allocate, including the null block 0."""
    override = cfg.resolve("num_gpu_blocks_override")
    if override:
        return int(override) + 1
    if device.type == "cpu":
        budget = cfg.resolve("kv_cache_memory_bytes", CPU_KV_CACHE_BYTES, parse=int)
    else:
        budget = cfg.resolve("kv_cache_memory_bytes", parse=int)
        if budget is None:
            budget = _gpu_budget(device, cfg.resolve("gpu_memory_utilization"), max_num_batched_tokens, spec)
            cfg.set("kv_cache_memory_bytes", budget, "profile")
    num_blocks = int(budget) // spec.bytes_per_block
    if num_blocks < 2:
        raise MemoryError(
            f"only {budget / 2**20:.0f} MiB are left for the KV cache, less than two blocks of "
            f"{spec.bytes_per_block / 2**20:.2f} MiB; raise gpu_memory_utilization or kv_cache_memory_bytes"
        )
    return num_blocks


def _gpu_budget(device: torch.device, utilization: float, max_num_batched_tokens: int, spec: KVCacheSpec) -> int:
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    used_by_others = total - free - torch.cuda.memory_reserved(device)
    weights = torch.cuda.memory_allocated(device)
    # Activations of one forward at the token budget: a conservative estimate until profiled.
    activation = max_num_batched_tokens * 64 * 1024
    budget = int(total * utilization) - used_by_others - weights - activation
    logger.info("GPU memory: %.1f GiB total, %.1f GiB weights, %.1f GiB reserved for activations",
                total / 2**30, weights / 2**30, activation / 2**30)
    return max(budget, 0)
