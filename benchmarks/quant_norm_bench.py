"""AWQ g128 decode GEMVs at batch 1: the residual add + RMSNorm fused into the skinny int4 kernel
(``revolta::quant_matmul_add_rms_norm``) against the separate ``fused_add_rms_norm`` kernel, and launch-plan
variants of the skinny kernel for the 4096-class shapes, all as CUDA-graph chains with PDL (the timing helpers
of gemv_bench.py: us per call inside one captured graph, weights rotated through copies > 3x the L2).

- ``sweep``: chains K x N then N x K (each output feeds the next call) per plan variant (``native_quant.tune``
  process-wide): default (8 warps x 8 rows, every resident slot), 4 rows per step, half the slots, and the
  co-resident kernel (4 blocks per SM, <= 64 registers) with half the slots, and the split-K-free kernel
  (csrc/quant_gemv_full.cuh; "default" = its built-in rule: N <= 8192, "full" = wherever it exists, "nofull" =
  never). % of copy = bytes / time /
  copy bandwidth (bytes = packed int4 + scales + zeros + x + y), as gemv_bench.py.
- ``llama8b``: Llama-3.1-8B's 32 distinct layers in decode order (qkv 4096x6144, o 4096x4096, gate_up
  4096x28672, down 14336x4096 with SiLU fused), the add + norm before qkv and gate_up either as the separate
  ``fused_add_rms_norm`` kernel or fused (what the engine runs with REVOLTA_FUSED_NORM=1), for each plan
  variant: ms per step of these 128-192 launches.
"""

from __future__ import annotations

import argparse
import json

import torch
from gemv_common import awq_bytes, awq_weights, copies, copy_bandwidth, graph_us

from revolta_kernels import native_quant, ops, ops_quant

VARIANTS = {  # name -> native_quant.tune kwargs (run 1 also had share2, r4_share2, co: all slower)
    "default": {},
    "nofull": {"gemv_full": 0},
    "full": {"gemv_full": 1},
    "r4": {"gemv_warps": 8, "gemv_rows": 4, "gemv_full": 0},
    "co_share2": {"gemv_warps": 8, "gemv_rows": 4, "gemv_share": 2, "gemv_minb": 4, "gemv_full": 0},
    "full_co_share2": {"gemv_warps": 8, "gemv_rows": 4, "gemv_share": 2, "gemv_minb": 4, "gemv_full": 1},
}
SWEEP_SHAPES = [(4096, 4096), (4096, 6144), (4096, 14336), (4096, 28672), (5120, 27648)]


def sweep(copy_gbs: float, names: list[str]) -> dict:
    res: dict = {}
    for k, n in SWEEP_SHAPES:
        c = max(copies(awq_bytes(k, n)), 8)
        fwd, back = [awq_weights(k, n) for _ in range(c)], [awq_weights(n, k) for _ in range(c)]
        st = {"h": torch.randn(1, k, device="cuda").half()}
        calls = []
        for wf, wb in zip(fwd, back, strict=True):
            calls.append(lambda wf=wf, st=st: st.__setitem__("y", ops_quant.quant_matmul(st["h"], *wf, 4, 128, 0)))
            calls.append(lambda wb=wb, st=st: st.__setitem__("h", ops_quant.quant_matmul(st["y"], *wb, 4, 128, 0)))
        row = {}
        for name in names:
            native_quant.tune(**VARIANTS[name])
            us = graph_us(calls)
            row[name] = {"us": us, "frac_copy": (awq_bytes(k, n) + awq_bytes(n, k)) / 2 / us / 1e3 / copy_gbs,
                         "plans": [native_quant.plan(1, n, k, 4, 128, torch.device("cuda")),
                                   native_quant.plan(1, k, n, 4, 128, torch.device("cuda"))]}
        native_quant.tune()
        res[f"{k}x{n}"] = row
        print(f"AWQ chain {k}x{n} + back, % of copy: " + ", ".join(
            f"{name} {100 * v['frac_copy']:.1f} ({v['us']:.2f} us, splits {v['plans'][0]['splits']}/"
            f"{v['plans'][1]['splits']}, {v['plans'][0]['blocks_per_sm']} blk/SM, full {v['plans'][0]['full']}/"
            f"{v['plans'][1]['full']})" for name, v in row.items()),
            flush=True)
        del fwd, back, calls
    return res


def llama8b(names: list[str]) -> dict:
    res: dict = {}
    q = [[awq_weights(4096, 6144), awq_weights(4096, 4096), awq_weights(4096, 28672), awq_weights(14336, 4096)]
         for _ in range(32)]
    ln = [((torch.rand(4096, device="cuda") + 0.5).half(), (torch.rand(4096, device="cuda") + 0.5).half())
          for _ in range(32)]
    st = {"x": torch.randn(1, 4096, device="cuda").half() * 0.1, "r": torch.randn(1, 4096, device="cuda").half()}

    def calls(fused: bool):
        out = []
        for (qkv, o, gu, down), (ln1, ln2) in zip(q, ln, strict=True):
            if fused:
                def pre(w, lw, dst):
                    y, h = ops_quant.quant_matmul_add_rms_norm(st["x"], st["r"], lw, 1e-5, False, *w, 4, 128, 0)
                    st[dst], st["r"] = y, h
            else:
                def pre(w, lw, dst):
                    normed, h = ops.fused_add_rms_norm(st["x"], st["r"], lw, 1e-5, False)
                    st[dst], st["r"] = ops_quant.quant_matmul(normed, *w, 4, 128, 0), h
            out.append(lambda w=qkv, lw=ln1, pre=pre: pre(w, lw, "a"))
            out.append(lambda w=o: st.__setitem__("x", ops_quant.quant_matmul(st["a"][:, :4096], *w, 4, 128, 0)))
            out.append(lambda w=gu, lw=ln2, pre=pre: pre(w, lw, "g"))
            out.append(lambda w=down: st.__setitem__("x", ops_quant.quant_matmul_silu(st["g"], *w, 4, 128, 0)))
        return out

    for name in names:
        native_quant.tune(**VARIANTS[name])
        row = {}
        for fused in (False, True):
            seq = calls(fused)
            row["fused_norm" if fused else "separate_norm"] = graph_us(seq) * len(seq) / 1e3  # ms per step
        res[name] = row
        print(f"Llama-8B 32-layer AWQ linears, plan {name}: separate norm {row['separate_norm']:.3f} ms, "
              f"fused norm {row['fused_norm']:.3f} ms per step", flush=True)
    native_quant.tune()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--sections", default="sweep,llama8b")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    names = args.variants.split(",")
    native_quant.set_pdl(True)
    copy_gbs = copy_bandwidth()
    print(f"copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    result: dict = {"device": torch.cuda.get_device_name(), "copy_GBps": copy_gbs}
    if "sweep" in args.sections:
        result["sweep"] = sweep(copy_gbs, names)
        result["best_per_shape"] = {s: max(r, key=lambda v, r=r: r[v]["frac_copy"]) for s, r in result["sweep"].items()}
        print("best per shape:", result["best_per_shape"], flush=True)
    if "llama8b" in args.sections:
        result["llama8b_ms_per_step"] = ll = llama8b(names)
        result["llama8b_best"] = min(ll, key=lambda v: ll[v]["fused_norm"])
        print("fastest plan (fused norm):", result["llama8b_best"], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
