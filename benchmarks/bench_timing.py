"""Event timing shared by the benchmarks: the median of CUDA-event-timed batches of calls."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def time_ms(fn: Callable[[], object], reps: int = 10, inner: int = 1, warmup: int = 2) -> float:
    """Median milliseconds per call of ``fn`` over ``reps`` event-timed batches of ``inner`` calls, after
    ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)
