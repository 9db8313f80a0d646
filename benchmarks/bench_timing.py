"""What the benchmarks share for timing: the median of CUDA-event-timed batches of calls, and the capture of a
sequence of calls into one CUDA graph."""

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


class ChainGraph(torch.cuda.CUDAGraph):
    """A captured chain that holds the tensors its first calls read (``inputs``) for as long as it lives."""

    inputs: list[torch.Tensor]


def capture(calls: list[Callable[[], object]], st: dict | None = None) -> ChainGraph:
    """Warm ``calls`` up eagerly on a side stream, then capture them in order into one graph.

    ``st``: the state dict the calls read and rebind as they run. The graph reads the tensors it holds when
    capture begins, so the graph keeps them itself: otherwise they are freed, and a later capture's
    ``empty_cache()`` may return their memory to the driver (an illegal address on replay, H200 session 7)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = ChainGraph()
    g.inputs = list(st.values()) if st is not None else []
    with torch.cuda.graph(g):
        for fn in calls:
            fn()
    return g
