"""The collectives a tensor-parallel forward pass needs.

Layers call them only when they were built split (their own record of it, not the build-time layout), so each
call runs in the process groups of :func:`~revolta_engine.parallel.state.init_process_groups`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from revolta_engine.parallel.state import device_group, host_group


def tp_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over the shards, in place (row-parallel outputs, vocab-parallel embedding lookups)."""
    dist.all_reduce(x, group=device_group())
    return x


def tp_gather_last(x: torch.Tensor) -> torch.Tensor:
    """Every shard's ``x`` concatenated along the last dimension, in rank order, on rank 0 (vocab-parallel logits:
    only rank 0 samples); the other ranks get their own ``x`` back."""
    group = device_group()
    x = x.contiguous()
    if dist.get_rank(group) != 0:
        dist.gather(x, None, dst=0, group=group)
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.gather(x, parts, dst=0, group=group)
    return torch.cat(parts, dim=-1)


def broadcast_tensor(x: torch.Tensor) -> torch.Tensor:
    """Rank 0's ``x`` into every shard's ``x`` (same shape and dtype on all), in place."""
    dist.broadcast(x, src=0, group=device_group())
    return x


def broadcast_object(obj: Any) -> Any:
    """Rank 0's picklable ``obj`` on every shard (the others pass None)."""
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=host_group())
    return box[0]


def all_ranks_min(value: int) -> int:
    """The smallest of every shard's ``value`` (the KV blocks every shard can hold)."""
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=host_group())
    return int(t.item())
