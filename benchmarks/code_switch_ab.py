"""Does switching kernel code between the links of a PDL chain cost time? (Cold instruction cache after the wait.)

Two M=1 AWQ shapes alternate in a dependent chain (K x N, then N x K, output feeding input), each link launched with
one of two launch variants that do the same work with different kernel code (A, B: quant_matmul's launch overrides,
``native_quant.tune``, set on the host before each call is captured). Four chains are timed, interleaved over
``--rounds``: A A A A..., B B B B..., A B A B... and B A B A.... If code switching costs nothing, the mixed chains take
the mean of the pure ones; the excess per link is what a link pays for running code the previous link did not.

    python3 benchmarks/code_switch_ab.py --out code_switch.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from bench_timing import capture
from gemv_common import awq_bytes, awq_weights, copies, replay_us

from revolta_kernels import native_quant, ops_quant

# name: (K, N, tune A, tune B); tune = native_quant.tune keyword arguments
PAIRS = {
    # the split-K kernel with the scale deferred to the flush (default) or applied per weight
    "splitk_defer_14336x4096": (14336, 4096, {}, {"gemv_defer": 0}),
    # the same kernel code with 8- and 4-row steps
    "splitk_rows_14336x4096": (14336, 4096, {}, {"gemv_rows": 4}),
    # the split-K-free kernel with 16- (default) or 32-column blocks
    "full_cols_4096x4096": (4096, 4096, {}, {"gemv_flags": 2}),
}


def chain_graph(k: int, n: int, pattern: str, tunes: dict[str, dict], links: int):
    """A graph of ``links`` dependent calls alternating K x N and N x K, link i launched under
    tunes[pattern[i % len(pattern)]]."""
    c = max(copies(awq_bytes(k, n)), links // 2)
    fwd = [awq_weights(k, n) for _ in range(c)]
    back = [awq_weights(n, k) for _ in range(c)]
    state = {"h": torch.randn(1, k, device="cuda").half()}
    calls = []
    for i in range(links):
        w = (fwd if i % 2 == 0 else back)[(i // 2) % c]
        src, dst = ("h", "y") if i % 2 == 0 else ("y", "h")
        tune = tunes[pattern[i % len(pattern)]]

        def call(w=w, src=src, dst=dst, tune=tune):
            native_quant.tune(**tune)
            state[dst] = ops_quant.quant_matmul(state[src], *w, 4, 128, 0)
        calls.append(call)
    g = capture(calls, state)
    native_quant.tune()
    return g, (fwd, back)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--links", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    native_quant.set_pdl(True)
    result = {}
    for name, (k, n, ta, tb) in PAIRS.items():
        tunes = {"A": ta, "B": tb}
        plans = {}
        for key, t in tunes.items():
            native_quant.tune(**t)
            plans[key] = [native_quant.plan(1, n, k, 4, 128, torch.device("cuda")),
                          native_quant.plan(1, k, n, 4, 128, torch.device("cuda"))]
        native_quant.tune()
        graphs = {p: chain_graph(k, n, p, tunes, args.links) for p in ("AA", "BB", "AB", "BA")}
        times: dict[str, list[float]] = {p: [] for p in graphs}
        for _ in range(args.rounds):
            for p, (g, _keep) in graphs.items():
                times[p].append(replay_us(g) / args.links)
        med = {p: statistics.median(v) for p, v in times.items()}
        excess = (med["AB"] + med["BA"]) / 2 - (med["AA"] + med["BB"]) / 2
        result[name] = {"K": k, "N": n, "plans": plans, "us_per_link": med, "rounds": times,
                        "mixed_minus_pure_us": excess}
        print(f"{name}: us per link AA {med['AA']:.2f} BB {med['BB']:.2f} AB {med['AB']:.2f} BA {med['BA']:.2f}; "
              f"mixed - pure {excess:+.2f} us", flush=True)
        del graphs
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
