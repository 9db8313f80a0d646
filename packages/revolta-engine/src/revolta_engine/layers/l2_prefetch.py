"""Pulling upcoming decode weights into the GPU's L2 cache while latency-bound kernels run.

In a small-batch decode step the rotary and attention kernels take several microseconds each but move almost
no data, so DRAM sits idle between the q/k/v projection and the output projection. :class:`WeightPrefetch`
fills that gap: right after the q/k/v GEMV it forks a side stream (a parallel branch when the step is a CUDA
graph) that issues ``revolta::l2_prefetch`` for the leading bytes of the weights the next GEMVs stream (the
output projection, then the MLP's gate/up projection), up to a budget. Those GEMVs then find part of their
weights on chip. It is only a hint: results never change, and where it does not pay it only spends bandwidth.

The budget defaults to ``DEFAULT_L2_FRACTION`` of the GPU's L2 cache; ``REVOLTA_L2_PREFETCH_MB`` sets it in
MiB (``0`` turns the prefetch off). The branch rejoins the main stream at :func:`join_prefetch`, which
the model calls once at the end of its forward pass (CUDA graph capture needs every fork joined).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import torch

from revolta_kernels import ops_memory

if TYPE_CHECKING:
    from revolta_engine.layers.linear import Linear

DEFAULT_L2_FRACTION = 0.6
PREFETCH_MAX_ROWS = 8  # decode-sized calls only: larger batches are compute-bound and keep DRAM busy


def _env_budget_mb() -> float | None:
    raw = os.environ.get("REVOLTA_L2_PREFETCH_MB")
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"REVOLTA_L2_PREFETCH_MB must be a number of MiB (0 turns the prefetch off), got {raw!r}") from exc
    if value < 0:
        raise ValueError(f"REVOLTA_L2_PREFETCH_MB must not be negative, got {raw!r}")
    return value


@cache
def budget_bytes(device_index: int) -> int:
    """Bytes one prefetch may ask for on this GPU: ``REVOLTA_L2_PREFETCH_MB``, else a fraction of its L2."""
    mb = _env_budget_mb()
    if mb is not None:
        return int(mb * 2**20)
    return int(torch.cuda.get_device_properties(device_index).L2_cache_size * DEFAULT_L2_FRACTION)


@cache
def _side_stream(device_index: int) -> torch.cuda.Stream:
    return torch.cuda.Stream(device=device_index)


class WeightPrefetch:
    """Prefetches, from a side stream, the weights of the layers given (in the order they run) into L2.

    Each layer's tensors (:meth:`~revolta_engine.layers.linear.Linear.streamed_weights`) share the budget left
    in proportion to their sizes, so a layer that does not fit gets the same leading fraction of its packed
    weights, scales and zero points (the rows its GEMV reads first).
    """

    def __init__(self, layers: Sequence[Linear]) -> None:
        self.layers = list(layers)
        self._plans: dict[int, tuple[list[torch.Tensor], list[int]]] = {}

    def plan(self, budget: int) -> tuple[list[torch.Tensor], list[int]]:
        """The tensors and leading byte counts to prefetch within ``budget`` bytes (multiples of 16)."""
        picked: list[torch.Tensor] = []
        nbytes: list[int] = []
        for layer in self.layers:
            tensors = [t for t in layer.streamed_weights() if t.is_contiguous()]
            total = sum(t.numel() * t.element_size() for t in tensors)
            if budget < 16 or total == 0 or len(picked) + len(tensors) > ops_memory.MAX_PREFETCH_RANGES:
                break
            share = min(1.0, budget / total)
            for t in tensors:
                n = int(t.numel() * t.element_size() * share) // 16 * 16
                if n > 0:
                    picked.append(t)
                    nbytes.append(n)
                    budget -= n
        return picked, nbytes

    def _plan(self, device_index: int) -> tuple[list[torch.Tensor], list[int]]:
        plan = self._plans.get(device_index)
        if plan is None:
            plan = self._plans[device_index] = self.plan(budget_bytes(device_index))
        return plan

    def issue(self, x: torch.Tensor) -> None:
        """Fork the side stream after the kernels queued so far and prefetch there (nothing unless
        :func:`prefetch_active`)."""
        if not prefetch_active(x):
            return
        device = _device_index(x)
        tensors, nbytes = self._plan(device)
        if not tensors:
            return
        main, side = torch.cuda.current_stream(x.device), _side_stream(device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            ops_memory.l2_prefetch(tensors, nbytes)


def _device_index(x: torch.Tensor) -> int:
    return x.device.index if x.device.index is not None else torch.cuda.current_device()


def prefetch_active(x: torch.Tensor) -> bool:
    """Whether a forward pass over activations ``x`` prefetches: CUDA, decode-sized, a budget above zero."""
    if not x.is_cuda or x.numel() // max(x.shape[-1], 1) > PREFETCH_MAX_ROWS:
        return False
    return budget_bytes(_device_index(x)) > 0


def join_prefetch(x: torch.Tensor) -> None:
    """Make the current stream wait for the prefetch side stream, where a pass over ``x`` forked it."""
    if prefetch_active(x):
        torch.cuda.current_stream(x.device).wait_stream(_side_stream(_device_index(x)))
