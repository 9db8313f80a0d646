"""Where a quantized MoE layer's step is faster over rows sorted by expert (``QuantizedExperts.sorted_gemm``: one
tensor-core ``revolta::quant_moe_gemm`` per projection, each expert's weights read once per 64-row tile) than through
the grouped decode kernels (``QuantizedExperts.grouped``: ``revolta::quant_moe_matmul`` + the down projection and
weighted sum, each routed row reading its expert's weights).

For each model's experts (int4, group 128) and token count, the engine's two paths run on the same random routing,
timed as CUDA-graph replays, cold (the calls rotate through enough expert stacks to exceed 3x the L2). Reported:
microseconds per layer for each path, the sorted path's speed-up, and the relative L2 difference of the two outputs.
The engine takes the grouped path up to ``quant_moe.GROUPED_MAX_TOKENS`` tokens; this measures where that limit
should sit.

``--tile`` picks the sorted GEMM's tile (csrc/quant_moe_gemm.cuh: 0 wide, 1 short; default: the library's) and
``--sorted-only`` skips the grouped path (an A/B of the tiles).

Usage (on a GPU machine): python benchmarks/quant_moe_sorted_bench.py --out $OUT/quant_moe_sorted_bench.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math

import torch
from common import timing
from quant_moe_bench import GROUP, MODELS, expert_bytes, stack

from revolta_engine.layers.quant import QuantConfig
from revolta_engine.layers.quant_moe import GROUPED_MAX_TOKENS, QuantizedExperts, StackedProjection
from revolta_kernels import native_quant_moe

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
time_ms = functools.partial(timing.time_ms, reps=15, inner=1, warmup=3)


def stacks(e: int, hidden: int, inter: int) -> tuple[StackedProjection, StackedProjection]:
    """One layer's random stacked experts (gate/up, down) in the kernels' layout."""
    return (StackedProjection(*stack(e, hidden, 2 * inter), 4, GROUP, 0),
            StackedProjection(*stack(e, inter, hidden), 4, GROUP, 0))


def layer(name: str, e: int, hidden: int, inter: int, top_k: int, tokens: int, grouped: bool = True) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).half()
    ids = torch.stack([torch.randperm(e, device="cuda", generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, device="cuda", generator=gen).softmax(-1)
    distinct = int(torch.unique(ids).numel())
    touched = distinct * (expert_bytes(hidden, 2 * inter) + expert_bytes(inter, hidden))
    copies = max(2, math.ceil(3 * torch.cuda.get_device_properties(0).L2_cache_size / touched))
    layers = [stacks(e, hidden, inter) for _ in range(copies)]
    experts = QuantizedExperts(0, hidden, inter, QuantConfig("awq", 4, GROUP), "bench")  # only the stacks count

    def sorted_path(lay):
        experts.stacked = lay
        return experts.sorted_gemm(x, weights.half(), ids)

    def grouped_path(lay):
        experts.stacked = lay
        return experts.grouped(x, weights, ids)

    row = {"model": name, "tokens": tokens, "distinct_experts": distinct}
    got_sorted = sorted_path(layers[0]).float()
    row["sorted_us"] = time_ms(timing.capture([functools.partial(sorted_path, lay) for lay in layers]).replay) \
        * 1e3 / copies
    if grouped and tokens <= GROUPED_MAX_TOKENS:
        got_grouped = grouped_path(layers[0]).float()
        row["rel_diff"] = float(torch.linalg.norm(got_sorted - got_grouped) / torch.linalg.norm(got_grouped))
        row["grouped_us"] = time_ms(
            timing.capture([functools.partial(grouped_path, lay) for lay in layers]).replay) * 1e3 / copies
        row["sorted_speedup"] = row["grouped_us"] / row["sorted_us"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="quant_moe_sorted_bench.json")
    ap.add_argument("--models", default="Qwen3.5-35B-A3B,Qwen3-30B-A3B", help="comma-separated names from MODELS")
    ap.add_argument("--tile", type=int, default=-1, help="the sorted GEMM's tile (0 wide, 1 short; -1: default)")
    ap.add_argument("--sorted-only", action="store_true", help="time the sorted path only")
    args = ap.parse_args()
    native_quant_moe.set_gemm_tile(args.tile)
    tile = native_quant_moe.set_gemm_tile(-1)
    wanted = args.models.split(",")
    rows = []
    print(f"{torch.cuda.get_device_name()}, sorted GEMM tile {tile}", flush=True)
    for model in (m for m in MODELS if m[0] in wanted):
        for tokens in TOKENS:
            r = layer(*model, tokens, grouped=not args.sorted_only)
            r["tile"] = tile
            rows.append(r)
            grouped = (f"grouped {r['grouped_us']:8.1f} us  sorted x{r['sorted_speedup']:5.2f}  rel diff "
                       f"{r['rel_diff']:.1e}" if "grouped_us" in r else "")
            print(f"{r['model']:18s} T={tokens:5d} {r['distinct_experts']:4d} experts  sorted {r['sorted_us']:8.1f} us  "
                  f"{grouped}", flush=True)
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
