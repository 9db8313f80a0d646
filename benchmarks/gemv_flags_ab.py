"""A/B of the skinny AWQ kernels' schedule flags (native_quant.tune(gemv_flags=...)) on PDL-chained M=1 calls.

Each chain is captured in one CUDA graph per flag setting (the launch plan depends on the flags), on the same
weights (rotated through copies > 3x L2), and the settings are timed in interleaved rounds (median per setting)
so clock drift and noise hit them alike. Chains: Llama-3.1-8B's 32 layers (qkv with the fused add + RMSNorm,
o, gate_up with the fused norm, down with the fused SiLU), 4096x4096 back and forth, 4096x14336 / 14336x4096.

Usage (GPU): python benchmarks/gemv_flags_ab.py --flags 0,2,4,6 --out ab.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_timing import capture
from gemv_common import awq_bytes, awq_weights, copy_bandwidth, replay_us  # noqa: E402
from gemv_probe import step_call  # noqa: E402

from revolta_kernels import native_quant  # noqa: E402


def build_calls(steps, ws, norm_w, st):
    return [step_call(st, w, k, act, g) for layer in ws
            for (_, k, _, act), w, g in zip(steps, layer, norm_w, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--flags", default="0,2,4,6")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chains", help="comma-separated chain names (default: all)")
    ap.add_argument("--pdl", type=int, choices=(0, 1), default=1, help="programmatic dependent launch on / off")
    ap.add_argument("--out")
    args = ap.parse_args()
    flags = [int(f) for f in args.flags.split(",")]
    native_quant.set_pdl(bool(args.pdl))
    bw = copy_bandwidth()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    chains = {
        "llama8b_32_layers": ([("qkv_norm", 4096, 6144, 2), ("o", 4096, 4096, 0), ("gate_up_norm", 4096, 28672, 2),
                               ("down_silu", 14336, 4096, 1)], 32),
        "4096x4096": ([("fwd", 4096, 4096, 0), ("back", 4096, 4096, 0)], 0),
        "4096x6144_norm": ([("fwd_norm", 4096, 6144, 2), ("back", 6144, 4096, 0)], 0),
        "4096x14336": ([("fwd", 4096, 14336, 0), ("back", 14336, 4096, 0)], 0),
    }
    if args.chains:
        chains = {name: chains[name] for name in args.chains.split(",")}
    result: dict = {"copy_gbs": bw, "flags": flags, "pdl": args.pdl, "chains": {}}
    print(f"copy {bw:.0f} GB/s", flush=True)
    for name, (steps, layers) in chains.items():
        per = sum(awq_bytes(k, n) for (_, k, n, _) in steps)
        copies = layers or max(8, math.ceil(3 * l2 / per))
        ws = [[awq_weights(k, n) for (_, k, n, _) in steps] for _ in range(copies)]
        norm_w = [(torch.randn(k, device="cuda") * 0.1 + 1).half() for (_, k, _, _) in steps]
        st = {"y": torch.randn(1, steps[0][1], device="cuda").half(), "res": torch.randn(1, 4096, device="cuda").half()}
        graphs = {}
        for f in flags:
            native_quant.tune(gemv_flags=f)
            graphs[f] = capture(build_calls(steps, ws, norm_w, st), st)
        native_quant.tune()
        times: dict[int, list[float]] = {f: [] for f in flags}
        for _ in range(args.rounds):
            for f in flags:
                times[f].append(replay_us(graphs[f]))
        ideal = per * copies / bw / 1e3
        row = {"calls": len(steps) * copies, "bytes": per * copies, "ideal_us": ideal}
        for f in flags:
            med = statistics.median(times[f])
            row[f"flags{f}"] = {"us": med, "us_per_call": med / (len(steps) * copies), "frac_copy": ideal / med,
                                "all_us": times[f]}
        result["chains"][name] = row
        print(f"{name}: ideal {ideal:.1f} us; " + "; ".join(
            f"flags {f}: {row[f'flags{f}']['us']:.1f} us ({100 * row[f'flags{f}']['frac_copy']:.1f}% of copy, "
            f"spread {min(times[f]):.1f}-{max(times[f]):.1f})" for f in flags), flush=True)
        del graphs, ws
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
