"""Decode-size GEMVs with and without programmatic dependent launch (PDL), in CUDA graphs, against this
GPU's copy bandwidth measured in the same run.

Every time is microseconds per call inside one captured CUDA graph of many calls (replayed, event-timed),
weights rotated through copies > 3x the L2 so every call streams its weights from DRAM ("cold", as a decode
step reading each layer once). Three settings, each captured separately with PDL off and on
(``native_quant.set_pdl``; REVOLTA_PDL=0/1 does the same per process):

- ``indep``: the same activations into every call, distinct weights per call (the "isolated" number of
  quant_bench.py's ``m1_cold``: back-to-back launches that do not depend on each other's data; with PDL off
  each still starts only after the previous one finished);
- ``chain``: each call's output feeds the next (K x N alternates with N x K, as up/down projections do):
  the realistic decode dependency;
- ``llama8b``: the linears of Llama-3.1-8B's 32 distinct layers at batch 1 in decode order (qkv 6144x4096,
  o 4096x4096, gate_up 28672x4096, down 4096x14336 as [N x K]), chained, for AWQ g128 (skinny int4 kernel;
  down with and without the fused SiLU-and-mul), fp16 with the skinny fp16 GEMV (down fused, or after the
  separate silu_and_mul kernel as the engine runs it), and fp16 with cuBLAS plus the separate silu_and_mul
  kernel (the engine before this change). The dense section also times lm_head (128256 x 4096) at M = 1, 2.
- ``dense_norm`` / ``llama8b_norm`` (not in the default sections): the fp16 GEMV with the residual add + RMSNorm
  fused in (``dense_linear_add_rms_norm``) against the separate ``fused_add_rms_norm`` kernel + GEMV, on the
  projections a pre-norm feeds (Llama-8B qkv and gate_up, Qwen3.5-35B-A3B GDN in_proj and attention qkv), and in
  Llama-8B's 32 layers with the residual stream.

Sweeps (PDL on): the AWQ kernel's split-K slot share (fill all resident block slots, or half so the next
kernel's blocks fit beside) and L2 prefetch budget on four chains, and the fp16 GEMV's block shape (warps,
rows per block); the sections after them use the best of each (``quant_tune`` / ``dense_tune`` in
the JSON: what REVOLTA_QUANT_TUNE / REVOLTA_DENSE_GEMV_TUNE take, for the engine runs).

% of copy = bytes / time / copy bandwidth, bytes = weights (packed int4 + scales + zeros for AWQ) +
activations in + output.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from gemv_bench_norm import dense_norm_section, llama8b_norm_section
from gemv_common import (
    DENSE_SHAPES,
    awq_bytes,
    awq_weights,
    both_pdl,
    copies,
    copy_bandwidth,
    graph_us,
    l2_bytes,
)

import revolta_kernels
from revolta_kernels import native_quant, ops, ops_quant

AWQ_SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096), (5120, 27648), (27648, 5120)]  # (K, N)


def awq_section(copy_gbs: float) -> list:
    rows = []
    for k, n in AWQ_SHAPES:
        nb = awq_bytes(k, n)
        c = max(copies(nb), 8)
        fwd = [awq_weights(k, n) for _ in range(c)]
        back = [awq_weights(n, k) for _ in range(c)]
        x = torch.randn(1, k, device="cuda").half()
        indep = both_pdl(lambda x=x, fwd=fwd: [lambda w=w: ops_quant.quant_matmul(x, *w, 4, 128, 0) for w in fwd * 2])
        state = {"h": x}

        def chain_calls(fwd=fwd, back=back, state=state):
            calls = []
            for wf, wb in zip(fwd, back, strict=True):
                calls.append(lambda wf=wf: state.__setitem__("y", ops_quant.quant_matmul(state["h"], *wf, 4, 128, 0)))
                calls.append(lambda wb=wb: state.__setitem__("h", ops_quant.quant_matmul(state["y"], *wb, 4, 128, 0)))
            return calls

        chain = both_pdl(chain_calls)
        chain_bytes = (awq_bytes(k, n) + awq_bytes(n, k)) / 2
        row = {"K": k, "N": n, "bytes": nb, "plan": native_quant.plan(1, n, k, 4, 128, torch.device("cuda")),
               "indep_us": indep, "chain_us_avg_of_KxN_and_NxK": chain,
               "indep_frac_copy": {key: nb / us / 1e3 / copy_gbs for key, us in indep.items()},
               "chain_frac_copy": {key: chain_bytes / us / 1e3 / copy_gbs for key, us in chain.items()}}
        for m in (4, 8):
            xm = torch.randn(m, k, device="cuda").half()
            native_quant.set_pdl(True)
            us = graph_us([lambda w=w, xm=xm: ops_quant.quant_matmul(xm, *w, 4, 128, 0) for w in fwd])
            row[f"m{m}_indep_pdl_us"] = us
            row[f"m{m}_indep_pdl_frac_copy"] = awq_bytes(k, n, m) / us / 1e3 / copy_gbs
        rows.append(row)
        print(f"AWQ K={k:6d} N={n:6d}: indep {indep['nopdl']:6.1f} -> {indep['pdl']:6.1f} us "
              f"({100 * row['indep_frac_copy']['nopdl']:.0f}% -> {100 * row['indep_frac_copy']['pdl']:.0f}% of copy); "
              f"chain {chain['nopdl']:6.1f} -> {chain['pdl']:6.1f} us ({100 * row['chain_frac_copy']['nopdl']:.0f}% -> "
              f"{100 * row['chain_frac_copy']['pdl']:.0f}%); M=4/8 pdl {100 * row['m4_indep_pdl_frac_copy']:.0f}%/"
              f"{100 * row['m8_indep_pdl_frac_copy']:.0f}%", flush=True)
        del fwd, back
    return rows


def dense_section(copy_gbs: float) -> list:
    rows = []
    for n, k, name in [*DENSE_SHAPES, (128256, 4096, "lm_head")]:
        nb = n * k * 2
        c = max(copies(nb), 4)
        ws = [(torch.randn(n, k, device="cuda") * 0.02).half() for _ in range(c)]
        row: dict = {"name": name, "N": n, "K": k, "weight_bytes": nb}
        for m in (1, 2) if name == "lm_head" else (1, 2, 4, 8):
            x = torch.randn(m, k, device="cuda").half()
            gemv = both_pdl(lambda x=x, ws=ws: [lambda w=w: ops_quant.dense_linear(x, w, False) for w in ws * 2])
            native_quant.set_pdl(True)
            cublas = graph_us([lambda w=w, x=x: F.linear(x, w) for w in ws * 2])
            nbm = nb + m * (n + k) * 2
            row[f"m{m}"] = {"gemv_us": gemv, "cublas_us": cublas, "gemv_pdl_frac_copy": nbm / gemv["pdl"] / 1e3 / copy_gbs,
                            "cublas_frac_copy": nbm / cublas / 1e3 / copy_gbs, "speedup_pdl": cublas / gemv["pdl"]}
        if name == "down":  # fused SiLU-and-mul vs silu_and_mul + F.linear / + the gemv
            for m in (1, 8):
                g = torch.randn(m, 2 * k, device="cuda").half()
                fused = graph_us([lambda w=w, g=g: ops_quant.dense_linear(g, w, True) for w in ws * 2])
                sep = graph_us([lambda w=w, g=g: F.linear(ops.silu_and_mul(g), w) for w in ws * 2])
                row[f"m{m}_silu"] = {"fused_gemv_us": fused, "silu_then_cublas_us": sep}
        rows.append(row)
        r1 = row["m1"]
        print(f"fp16 {name:8s} {n:6d}x{k:6d} M=1: cuBLAS {r1['cublas_us']:6.1f} us ({100 * r1['cublas_frac_copy']:.0f}%), "
              f"gemv {r1['gemv_us']['nopdl']:6.1f} (no PDL) / {r1['gemv_us']['pdl']:6.1f} us "
              f"({100 * r1['gemv_pdl_frac_copy']:.0f}%); M=2: cuBLAS {row['m2']['cublas_us']:.1f}, "
              f"gemv {row['m2']['gemv_us']['pdl']:.1f} us" + (f"; fused silu M=1 {row['m1_silu']}" if "m1_silu" in row else ""),
              flush=True)
        del ws
    return rows


QUANT_SWEEP = [(share, kb) for share in (1, 2) for kb in (0, 4096)]  # (slot share, L2 prefetch KB)


def quant_sweep(copy_gbs: float) -> dict:
    """AWQ M=1 chains (K x N then N x K), PDL on, for each split-K slot share (1 = fill every resident block
    slot, 2 = half: room for the next kernel's blocks) and L2 prefetch budget (whole grid, KB)."""
    res: dict = {}
    for k, n in ((4096, 4096), (4096, 14336), (5120, 27648), (4096, 6144)):
        c = max(copies(awq_bytes(k, n)), 8)
        fwd, back = [awq_weights(k, n) for _ in range(c)], [awq_weights(n, k) for _ in range(c)]
        st = {"h": torch.randn(1, k, device="cuda").half()}
        calls = []
        for wf, wb in zip(fwd, back, strict=True):
            calls.append(lambda wf=wf, st=st: st.__setitem__("y", ops_quant.quant_matmul(st["h"], *wf, 4, 128, 0)))
            calls.append(lambda wb=wb, st=st: st.__setitem__("h", ops_quant.quant_matmul(st["y"], *wb, 4, 128, 0)))
        row = {}
        for share, kb in QUANT_SWEEP:
            native_quant.tune(gemv_prefetch_kb=kb, gemv_share=share)
            us = graph_us(calls)
            row[f"{share},{kb}"] = {"us": us, "frac_copy": (awq_bytes(k, n) + awq_bytes(n, k)) / 2 / us / 1e3 / copy_gbs,
                                    "splits": [native_quant.plan(1, n, k, 4, 128, torch.device("cuda"))["splits"],
                                               native_quant.plan(1, k, n, 4, 128, torch.device("cuda"))["splits"]]}
        res[f"{k}x{n}"] = row
        print(f"AWQ chain {k}x{n} + back: (share, prefetch KB) -> % of copy: "
              + ", ".join(f"({key}): {100 * v['frac_copy']:.1f} (splits {v['splits']})" for key, v in row.items()),
              flush=True)
    native_quant.tune()
    best = max((f"{a},{b}" for a, b in QUANT_SWEEP),
               key=lambda key: statistics.geometric_mean(r[key]["frac_copy"] for r in res.values()))
    res["best_share_prefetch"] = best
    return res


def dense_sweep(copy_gbs: float) -> dict:
    """fp16 GEMV block shapes (warps, rows per block) at M = 1 and 4, PDL on, back-to-back calls."""
    res: dict = {}
    ws = {(n, k): [(torch.randn(n, k, device="cuda") * 0.02).half() for _ in range(max(copies(n * k * 2), 4))]
          for n, k, _ in DENSE_SHAPES}
    for warps in (4, 8):
        for rows in (4, 8):
            native_quant.dense_tune(warps, rows)
            row = {}
            for m in (1, 4):
                for (n, k), wl in ws.items():
                    x = torch.randn(m, k, device="cuda").half()
                    us = graph_us([lambda w=w, x=x: ops_quant.dense_linear(x, w, False) for w in wl * 2])
                    row[f"m{m}_{n}x{k}"] = (n * k * 2 + m * (n + k) * 2) / us / 1e3 / copy_gbs
            row["m1_geomean"] = statistics.geometric_mean(v for key, v in row.items() if key.startswith("m1_"))
            res[f"{warps},{rows}"] = row
            print(f"fp16 gemv warps {warps} rows {rows}: % of copy " + " ".join(f"{key} {100 * v:.0f}"
                                                                            for key, v in row.items()), flush=True)
    best = max(res, key=lambda key: res[key]["m1_geomean"])
    res["best"] = best
    native_quant.dense_tune(*(int(v) for v in best.split(",")))
    ws.clear()
    return res


def llama8b_section(copy_gbs: float) -> dict:
    """32 layers of (qkv, o, gate_up, down) chained at batch 1, each output feeding the next projection."""
    res: dict = {}
    # AWQ
    q = [[awq_weights(4096, 6144), awq_weights(4096, 4096), awq_weights(4096, 28672), awq_weights(14336, 4096)]
         for _ in range(32)]
    st = {"h": torch.randn(1, 4096, device="cuda").half()}

    def awq_calls(fused: bool):
        calls = []
        for qkv, o, gu, down in q:
            calls.append(lambda w=qkv: st.__setitem__("a", ops_quant.quant_matmul(st["h"], *w, 4, 128, 0)))
            calls.append(lambda w=o: st.__setitem__("h", ops_quant.quant_matmul(st["a"][:, :4096], *w, 4, 128, 0)))
            calls.append(lambda w=gu: st.__setitem__("g", ops_quant.quant_matmul(st["h"], *w, 4, 128, 0)))
            if fused:
                calls.append(lambda w=down: st.__setitem__("h", ops_quant.quant_matmul_silu(st["g"], *w, 4, 128, 0)))
            else:
                calls.append(lambda w=down: st.__setitem__(
                    "h", ops_quant.quant_matmul(ops.silu_and_mul(st["g"]), *w, 4, 128, 0)))
        return calls

    awq_bytes_all = 32 * (awq_bytes(4096, 6144) + awq_bytes(4096, 4096) + awq_bytes(4096, 28672)
                          + awq_bytes(14336, 4096))
    for fused in (False, True):
        t = both_pdl(lambda fused=fused: awq_calls(fused))
        res[f"awq_{'fused' if fused else 'separate_silu'}_ms"] = {key: us * 128 / 1e3 for key, us in t.items()}
    res["awq_bytes"] = awq_bytes_all
    q.clear()
    d = [[(torch.randn(n, k, device="cuda") * 0.02).half() for n, k, _ in DENSE_SHAPES] for _ in range(32)]

    def dense_calls(kind: str):
        calls = []
        for qkv, o, gu, down in d:
            if kind == "cublas":
                calls += [lambda w=qkv: st.__setitem__("a", F.linear(st["h"], w)),
                          lambda w=o: st.__setitem__("h", F.linear(st["a"][:, :4096], w)),
                          lambda w=gu: st.__setitem__("g", F.linear(st["h"], w)),
                          lambda w=down: st.__setitem__("h", F.linear(ops.silu_and_mul(st["g"]), w))]
            else:
                calls += [lambda w=qkv: st.__setitem__("a", ops_quant.dense_linear(st["h"], w, False)),
                          lambda w=o: st.__setitem__("h", ops_quant.dense_linear(st["a"][:, :4096].contiguous(), w,
                                                                                  False)),
                          lambda w=gu: st.__setitem__("g", ops_quant.dense_linear(st["h"], w, False))]
                if kind == "gemv_fused":
                    calls.append(lambda w=down: st.__setitem__("h", ops_quant.dense_linear(st["g"], w, True)))
                else:
                    calls.append(lambda w=down: st.__setitem__(
                        "h", ops_quant.dense_linear(ops.silu_and_mul(st["g"]), w, False)))
        return calls

    dense_bytes = 32 * sum(n * k * 2 for n, k, _ in DENSE_SHAPES)
    native_quant.set_pdl(True)
    res["fp16_cublas_separate_silu_ms"] = graph_us(dense_calls("cublas")) * 128 / 1e3
    res["fp16_gemv_fused_ms"] = {key: us * 128 / 1e3 for key, us in both_pdl(lambda: dense_calls("gemv_fused")).items()}
    res["fp16_gemv_separate_silu_ms"] = {key: us * 128 / 1e3
                                         for key, us in both_pdl(lambda: dense_calls("gemv_sep")).items()}
    res["fp16_bytes"] = dense_bytes
    res["awq_fused_pdl_frac_copy"] = awq_bytes_all / (res["awq_fused_ms"]["pdl"] * 1e-3) / 1e9 / copy_gbs
    res["fp16_gemv_pdl_frac_copy"] = dense_bytes / (res["fp16_gemv_separate_silu_ms"]["pdl"] * 1e-3) / 1e9 / copy_gbs
    res["fp16_cublas_frac_copy"] = dense_bytes / (res["fp16_cublas_separate_silu_ms"] * 1e-3) / 1e9 / copy_gbs
    d.clear()
    print("llama8b linears, 32 layers, batch 1 (ms per step):", json.dumps(res), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--sections", default="quant_sweep,awq,dense_sweep,dense,llama8b")
    args = ap.parse_args()
    assert revolta_kernels.native_available(), revolta_kernels.native_status()
    copy_gbs = copy_bandwidth()
    result: dict = {"device": torch.cuda.get_device_name(), "copy_gbs": copy_gbs, "l2_bytes": l2_bytes(),
                    "pdl_available": native_quant.set_pdl(True)}
    print(f"copy bandwidth {copy_gbs:.0f} GB/s; PDL available: {result['pdl_available']}", flush=True)
    sections = args.sections.split(",")
    try:
        if "quant_sweep" in sections:
            result["awq_share_prefetch_sweep"] = qs = quant_sweep(copy_gbs)
            share, kb = (int(v) for v in qs["best_share_prefetch"].split(","))
            # what REVOLTA_QUANT_TUNE takes (built-in launch plan, the best share and prefetch budget)
            result["quant_tune"] = f"0,0,1,-1,-1,{kb},{share}"
            native_quant.tune(gemv_prefetch_kb=kb, gemv_share=share)
        if "awq" in sections:
            result["awq_m1"] = awq_section(copy_gbs)
        if "dense_sweep" in sections:
            result["fp16_gemv_sweep"] = ds = dense_sweep(copy_gbs)
            result["dense_tune"] = ds["best"]  # what REVOLTA_DENSE_GEMV_TUNE takes
        if "dense" in sections:
            result["fp16_gemv"] = dense_section(copy_gbs)
        if "llama8b" in sections:
            result["llama8b_linears"] = llama8b_section(copy_gbs)
        if "dense_norm" in sections:
            result["fp16_gemv_norm"] = dense_norm_section(copy_gbs)
        if "llama8b_norm" in sections:
            result["llama8b_norm"] = llama8b_norm_section(copy_gbs)
    finally:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
