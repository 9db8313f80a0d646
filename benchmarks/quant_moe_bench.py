"""Benchmark of the quantized MoE experts op (``revolta::quant_moe_matmul``) against this GPU's copy bandwidth.

For each model's experts (int4, group 128) and token count, one decode MoE layer's two calls (gate/up, then
SiLU-and-mul + down) are timed as CUDA-graph replays, cold: the calls rotate through enough expert stacks to exceed
3x the L2, as a decode step that reads every layer once does. Bytes = the packed weights, scales and zeros of the
distinct experts the rows picked + activations + outputs; reported as GB/s and as a fraction of the copy bandwidth
(a 2 GiB device-to-device copy). Each output is also checked against the reference (relative L2 error).

Each case runs with the kernel the library picks (``lean`` = the token limit of the one-token (decode batch 1) kernel,
csrc/quant_moe_lean.cuh) and, with ``--ab``, where that is the lean kernel, again with the original kernel forced
(``lean`` = 0), in the same process.

Usage (on a GPU machine): python benchmarks/quant_moe_bench.py [--ab] --out $OUT/quant_moe_bench.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math

import torch
from common import timing

from revolta_kernels import native_quant_moe, ops_quant
from revolta_kernels.reference import quant as ref_quant

# (name, experts, hidden, intermediate, top_k)
MODELS = [("Qwen3-30B-A3B", 128, 2048, 768, 8), ("Qwen3.5-35B-A3B", 256, 2048, 512, 8),
          ("Qwen3.5-122B-A10B", 256, 3072, 1024, 8)]
TOKENS = (1, 2, 4, 16)
GROUP = 128
time_ms = functools.partial(timing.time_ms, reps=15, inner=1, warmup=3)


def stack(e: int, k: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    qweight = torch.randint(-(2**31), 2**31 - 1, (e, k // 8, n), dtype=torch.int32, device="cuda")
    qzeros = torch.randint(-(2**31), 2**31 - 1, (e, k // GROUP, n // 8), dtype=torch.int32, device="cuda")
    scales = (torch.rand(e, k // GROUP, n, device="cuda") * 2e-3 + 1e-3).half()
    return qweight, scales, qzeros


def expert_bytes(k: int, n: int) -> int:
    return k * n // 2 + (k // GROUP) * n * 2 + (k // GROUP) * n // 2


def layer(name: str, e: int, hidden: int, inter: int, top_k: int, tokens: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).half()
    ids = torch.stack([torch.randperm(e, device="cuda", generator=gen)[:top_k] for _ in range(tokens)])
    distinct = int(torch.unique(ids).numel())
    touched = distinct * (expert_bytes(hidden, 2 * inter) + expert_bytes(inter, hidden))
    # enough stacks that the experts one replay reads are out of L2 when it comes round again
    copies = max(2, math.ceil(3 * torch.cuda.get_device_properties(0).L2_cache_size / touched))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="quant_moe_bench.json")
    ap.add_argument("--ab", action="store_true", help="also time each case with the original kernel forced")
    args = ap.parse_args()
    default_lean = native_quant_moe.set_lean_tokens(-1)
    copy = timing.copy_gbs(best=True)
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s", flush=True)
    rows = []
    for model in MODELS:
        for tokens in TOKENS:
            forced = args.ab and tokens <= default_lean  # above the limit the original kernel runs anyway
            for lean in (default_lean, 0) if forced else (default_lean,):
                native_quant_moe.set_lean_tokens(lean)
                r = layer(*model, tokens)
                r["lean"] = lean
                r["frac_copy"] = r["GBps"] / copy
                rows.append(r)
                print(f"{r['model']:18s} T={tokens:3d} lean {lean} {r['distinct_experts']:4d} experts {r['us']:8.1f} us "
                      f"{r['GBps']:7.0f} GB/s {100 * r['frac_copy']:5.1f}% of copy  rel err {r['rel_err']:.1e}",
                      flush=True)
                torch.cuda.empty_cache()
    native_quant_moe.set_lean_tokens(default_lean)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "copy_GBps": copy, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
