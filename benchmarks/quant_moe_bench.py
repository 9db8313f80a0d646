"""The quantized MoE experts (int4, group 128) of a decode layer against this GPU's copy bandwidth, and where the
engine's sorted path overtakes its grouped one.

- ``kernel``: for each model's experts and token count, one MoE layer's two ``revolta::quant_moe_matmul`` calls
  (gate/up, then SiLU-and-mul + down), as CUDA-graph replays, cold (the calls rotate through enough expert stacks to
  exceed 3x the L2, as a decode step that reads every layer once does). Bytes = the packed weights, scales and
  zeros of the distinct experts the rows picked + activations + outputs, as GB/s and as a fraction of the copy
  bandwidth; each output is checked against the reference (relative L2 error).
- ``crossover``: the engine's two paths on the same random routing, cold: rows sorted by expert
  (``QuantizedExperts.sorted_gemm``: one tensor-core ``revolta::quant_moe_gemm`` per projection, each expert's
  weights read once per 64-row tile) against the grouped decode kernels (``QuantizedExperts.grouped``: each routed
  row reads its expert's weights): microseconds per layer, the sorted path's speed-up and the relative difference
  of the outputs. The engine takes the grouped path up to ``GROUPED_MAX_TOKENS`` tokens; this measures where that
  limit should sit.

    python benchmarks/quant_moe_bench.py kernel --out bench_out/quant_moe_kernel.json
    python benchmarks/quant_moe_bench.py crossover --models Qwen3.5-35B-A3B --out bench_out/quant_moe_crossover.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path

import torch
from common import timing

from revolta_kernels import ops_quant
from revolta_kernels.reference import quant as ref_quant

# (name, experts, hidden, intermediate, top_k)
MODELS = [("Qwen3-30B-A3B", 128, 2048, 768, 8), ("Qwen3.5-35B-A3B", 256, 2048, 512, 8),
          ("Qwen3.5-122B-A10B", 256, 3072, 1024, 8)]
KERNEL_TOKENS = (1, 2, 4, 16)
CROSSOVER_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
GROUP = 128
time_ms = functools.partial(timing.time_ms, reps=15, inner=1, warmup=3)


def stack(e: int, k: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random packed int4 g128 weights of ``e`` experts, K x N each: (qweight, scales, qzeros)."""
    qweight = torch.randint(-(2**31), 2**31 - 1, (e, k // 8, n), dtype=torch.int32, device="cuda")
    qzeros = torch.randint(-(2**31), 2**31 - 1, (e, k // GROUP, n // 8), dtype=torch.int32, device="cuda")
    scales = (torch.rand(e, k // GROUP, n, device="cuda") * 2e-3 + 1e-3).half()
    return qweight, scales, qzeros


def expert_bytes(k: int, n: int) -> int:
    """Bytes of one expert's K x N projection: packed weights + scales + zeros."""
    return k * n // 2 + (k // GROUP) * n * 2 + (k // GROUP) * n // 2


def routing(e: int, hidden: int, top_k: int, tokens: int, inter: int) -> tuple:
    """Seeded activations, expert ids, the distinct experts' bytes and the stack copies that keep replays cold."""
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).half()
    ids = torch.stack([torch.randperm(e, device="cuda", generator=gen)[:top_k] for _ in range(tokens)])
    distinct = int(torch.unique(ids).numel())
    touched = distinct * (expert_bytes(hidden, 2 * inter) + expert_bytes(inter, hidden))
    # enough stacks that the experts one replay reads are out of L2 when it comes round again
    copies = max(2, math.ceil(3 * torch.cuda.get_device_properties(0).L2_cache_size / touched))
    return gen, x, ids, distinct, touched, copies


def kernel_layer(name: str, e: int, hidden: int, inter: int, top_k: int, tokens: int) -> dict:
    """One layer's grouped MoE kernel calls, cold, with their rate and error against the reference."""
    _, x, ids, distinct, touched, copies = routing(e, hidden, top_k, tokens, inter)
    layers = [(stack(e, hidden, 2 * inter), stack(e, inter, hidden)) for _ in range(copies)]

    def run(gu, dn):
        y = ops_quant.quant_moe_matmul(x, *gu, ids, 4, GROUP, 0, 0)
        return ops_quant.quant_moe_matmul(y, *dn, ids, 4, GROUP, 0, 1)

    got = run(*layers[0])
    y_ref = ref_quant.quant_moe_matmul(x, *layers[0][0], ids, 4, GROUP, 0, 0)
    ref = ref_quant.quant_moe_matmul(y_ref, *layers[0][1], ids, 4, GROUP, 0, 1)
    rel = float(torch.linalg.norm(got.float() - ref.float()) / torch.linalg.norm(ref.float()))
    graph = timing.capture([functools.partial(run, *lay) for lay in layers])
    us = time_ms(graph.replay) * 1e3 / len(layers)
    nbytes = (touched + tokens * top_k * (2 * inter * 2 * 2 + hidden * 2) + tokens * hidden * 2)
    return {"model": name, "tokens": tokens, "distinct_experts": distinct, "us": us, "GBps": nbytes / us / 1e3,
            "rel_err": rel}


def crossover_layer(name: str, e: int, hidden: int, inter: int, top_k: int, tokens: int) -> dict:
    """The engine's sorted and grouped paths on one layer, cold (the grouped one up to its token limit)."""
    from revolta_engine.layers.quant import QuantConfig
    from revolta_engine.layers.quant_moe import GROUPED_MAX_TOKENS, QuantizedExperts, StackedProjection

    gen, x, ids, distinct, _, copies = routing(e, hidden, top_k, tokens, inter)
    weights = torch.rand(tokens, top_k, device="cuda", generator=gen).softmax(-1)
    layers = [(StackedProjection(*stack(e, hidden, 2 * inter), 4, GROUP, 0),
               StackedProjection(*stack(e, inter, hidden), 4, GROUP, 0)) for _ in range(copies)]
    experts = QuantizedExperts(0, hidden, inter, QuantConfig("awq", 4, GROUP), "bench")  # only the stacks count

    def sorted_path(lay):
        experts.stacked = lay
        return experts.sorted_gemm(x, weights.half(), ids)

    def grouped_path(lay):
        experts.stacked = lay
        return experts.grouped(x, weights, ids)

    def per_layer_us(path) -> float:
        return time_ms(timing.capture([functools.partial(path, lay) for lay in layers]).replay) * 1e3 / copies

    row = {"model": name, "tokens": tokens, "distinct_experts": distinct, "grouped_max_tokens": GROUPED_MAX_TOKENS}
    got_sorted = sorted_path(layers[0]).float()
    row["sorted_us"] = per_layer_us(sorted_path)
    if tokens <= GROUPED_MAX_TOKENS:
        got_grouped = grouped_path(layers[0]).float()
        row["rel_diff"] = float(torch.linalg.norm(got_sorted - got_grouped) / torch.linalg.norm(got_grouped))
        row["grouped_us"] = per_layer_us(grouped_path)
        row["sorted_speedup"] = row["grouped_us"] / row["sorted_us"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("kernel", "crossover"))
    ap.add_argument("--models", default=",".join(m[0] for m in MODELS), help="comma-separated names from MODELS")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    wanted = args.models.split(",")
    copy = timing.copy_gbs(best=True)
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s", flush=True)
    rows = []
    for model in (m for m in MODELS if m[0] in wanted):
        for tokens in KERNEL_TOKENS if args.command == "kernel" else CROSSOVER_TOKENS:
            if args.command == "kernel":
                r = kernel_layer(*model, tokens)
                r["frac_copy"] = r["GBps"] / copy
                print(f"{r['model']:18s} T={tokens:3d} {r['distinct_experts']:4d} experts {r['us']:8.1f} us "
                      f"{r['GBps']:7.0f} GB/s {100 * r['frac_copy']:5.1f}% of copy  rel err {r['rel_err']:.1e}",
                      flush=True)
            else:
                r = crossover_layer(*model, tokens)
                grouped = (f"grouped {r['grouped_us']:8.1f} us  sorted x{r['sorted_speedup']:5.2f}  rel diff "
                           f"{r['rel_diff']:.1e}" if "grouped_us" in r else "")
                print(f"{r['model']:18s} T={tokens:5d} {r['distinct_experts']:4d} experts  sorted "
                      f"{r['sorted_us']:8.1f} us  {grouped}", flush=True)
            rows.append(r)
            torch.cuda.empty_cache()
    out = args.out or Path(f"bench_out/quant_moe_{args.command}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_GBps": copy, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
