"""What the benchmarks share for timing: the median of CUDA-event-timed batches of calls, the capture of a
sequence of calls into one CUDA graph, and the two ceilings results are reported against (copy bandwidth, fp16
matmul rate)."""

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


def copy_gbs(best: bool = False) -> float:
    """This GPU's device-to-device copy rate in GB/s: bytes read + written by a 2 GiB copy.

    The median of ten timed batches of three copies; ``best``: the fastest of ten single copies after three
    untimed ones (the end-to-end benchmarks' roofline). The allocator's cache is
    emptied after, so a model loaded next has the memory."""
    rate = _copy_rate(best)
    torch.cuda.empty_cache()
    return rate


def _copy_rate(best: bool) -> float:
    src = torch.empty(2**29, device="cuda").normal_()
    dst = torch.empty_like(src)
    nbytes = 2 * src.numel() * src.element_size()
    if not best:
        return nbytes / (time_ms(lambda: dst.copy_(src), reps=10, inner=3) / 1e3) / 1e9
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    seconds = float("inf")
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        seconds = min(seconds, start.elapsed_time(end) / 1e3)
    return nbytes / seconds / 1e9


def matmul_tflops(n: int = 8192) -> float:
    """This GPU's fp16 matrix rate in TFLOP/s: torch.matmul of two n x n fp16 matrices, median of ten batches."""
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    return 2 * n**3 / time_ms(lambda: a @ b, reps=10, inner=5) / 1e9


def replay_us(g: torch.cuda.CUDAGraph, reps: int = 5) -> float:
    """Mean microseconds per replay of a captured graph, after one warm-up replay."""
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        g.replay()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1e3 / reps


def graph_call_us(fn: Callable[[], object], calls: int = 8, reps: int = 30, inner: int = 10) -> float:
    """Microseconds per call of ``fn``, timed as CUDA-graph replays of ``calls`` calls each after one eager
    warm-up call (several calls per replay take the graph's own launch cost out of short kernels' times and
    keep the launch gaps between calls, as in an engine step)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return time_ms(graph.replay, reps=reps, inner=inner) / calls * 1e3


class ChainGraph(torch.cuda.CUDAGraph):
    """A captured chain that holds the tensors its first calls read (``inputs``) for as long as it lives."""

    inputs: list[torch.Tensor]


def capture(calls: list[Callable[[], object]], st: dict | None = None) -> ChainGraph:
    """Warm ``calls`` up eagerly on a side stream, then capture them in order into one graph.

    ``st``: the state dict the calls read and rebind as they run. The graph reads the tensors it holds when
    capture begins, so the graph keeps them itself: otherwise they are freed, and a later capture's
    ``empty_cache()`` may return their memory to the driver (an illegal address on replay)."""
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
