"""Latency statistics and the vllm-bench-like result table."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation, like numpy's default); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values_s: Sequence[float], percentiles: Sequence[float] = (99,)) -> dict[str, float]:
    """Mean, median, std and percentiles in milliseconds."""
    ms = [v * 1000.0 for v in values_s]
    out = {"mean": statistics.fmean(ms) if ms else 0.0, "median": statistics.median(ms) if ms else 0.0,
           "std": statistics.pstdev(ms) if ms else 0.0}
    for q in percentiles:
        out[f"p{q:g}"] = percentile(ms, q)
    return out


def write_result(path: str | None, result: dict) -> None:
    """Write ``result`` as indented JSON to ``path`` (nothing when None)."""
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)


def print_serve_report(result: dict, percentiles: Sequence[float] = (99,)) -> None:
    """Print the result sections in ``vllm bench serve``'s layout."""
    def row(name: str, value: object) -> None:
        text = f"{value:.2f}" if isinstance(value, float) else str(value)
        print(f"{name:<40}{text:<10}")

    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    row("Successful requests:", result["completed"])
    if result["failed"]:
        row("Failed requests:", result["failed"])
    row("Maximum request concurrency:", result["max_concurrency"] or "unlimited")
    row("Request rate configured (RPS):", result["request_rate"])
    row("Benchmark duration (s):", result["duration"])
    row("Total input tokens:", result["total_input_tokens"])
    row("Total generated tokens:", result["total_output_tokens"])
    row("Request throughput (req/s):", result["request_throughput"])
    row("Output token throughput (tok/s):", result["output_throughput"])
    row("Total Token throughput (tok/s):", result["total_token_throughput"])
    for key, title, label in (("ttft", "Time to First Token", "TTFT"),
                              ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
                              ("itl", "Inter-token Latency", "ITL"),
                              ("e2el", "End-to-end Latency", "E2EL")):
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        stats = result[key]
        row(f"Mean {label} (ms):", stats["mean"])
        row(f"Median {label} (ms):", stats["median"])
        for q in percentiles:
            row(f"P{q:g} {label} (ms):", stats[f"p{q:g}"])
    print("=" * 50)
