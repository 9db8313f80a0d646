"""Which tensor-parallel shard this process holds, and the process groups that join the shards.

Layers read the layout when they are built (:func:`get_tp_layout`), so a model built inside
:func:`tensor_parallel_layout` holds only its rank's share of every split weight. Collectives need the process
groups of :func:`init_process_groups`, which start after the weights are loaded (loading is local to a rank).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TensorParallelLayout:
    """This process's rank among ``size`` tensor-parallel shards."""

    rank: int = 0
    size: int = 1

    def split(self, total: int, what: str) -> tuple[int, int]:
        """``(start, size)`` of this rank's even share of ``total`` items; ValueError naming ``what`` if uneven."""
        if total % self.size:
            raise ValueError(f"{what} ({total}) is not divisible by tensor_parallel_size {self.size}")
        share = total // self.size
        return self.rank * share, share


_layout = TensorParallelLayout()
_groups: dict[str, Any] = {}


def get_tp_layout() -> TensorParallelLayout:
    """The layout models are being built for (rank 0 of 1 outside :func:`tensor_parallel_layout`)."""
    return _layout


@contextmanager
def tensor_parallel_layout(layout: TensorParallelLayout) -> Iterator[TensorParallelLayout]:
    """Build (and load) models for ``layout`` inside this block."""
    global _layout
    old, _layout = _layout, layout
    try:
        yield layout
    finally:
        _layout = old


def init_process_groups(layout: TensorParallelLayout, init_method: str, device: torch.device,
                        timeout_s: float = 1800.0) -> None:
    """Join the ``layout.size`` processes: NCCL for tensors on GPUs (gloo on the CPU), and a gloo group for the
    host messages (the step plans rank 0 sends)."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    if device.type == "cuda":  # bound to the rank's GPU: NCCL connects eagerly, and on the right device
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group(backend, init_method=init_method, rank=layout.rank, world_size=layout.size,
                                timeout=timeout, device_id=device)
    else:
        dist.init_process_group(backend, init_method=init_method, rank=layout.rank, world_size=layout.size,
                                timeout=timeout)
    _groups["device"] = dist.group.WORLD
    _groups["host"] = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD
    _groups["layout"] = layout


def groups_ready() -> bool:
    """Whether :func:`init_process_groups` ran in this process (and :func:`destroy_process_groups` did not)."""
    return bool(_groups)


def _group(name: str) -> Any:
    if not _groups:
        raise RuntimeError("a tensor-parallel collective ran before the process groups were initialized")
    return _groups[name]


def device_group() -> Any:
    """The group the activations' collectives run in."""
    return _group("device")


def host_group() -> Any:
    """The gloo group host objects travel in."""
    return _group("host")


def destroy_process_groups() -> None:
    """Leave the groups (idempotent)."""
    if _groups:
        _groups.clear()
        if dist.is_initialized():
            dist.destroy_process_group()
