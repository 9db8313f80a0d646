"""Decode-size GEMVs in CUDA graphs against this GPU's copy bandwidth measured in the same run.

``run`` (the default sections awq, dense, llama8b): every time is microseconds per call inside one captured CUDA
graph of many calls (replayed, event-timed), weights rotated through copies > 3x the L2 so every call streams its
weights from DRAM ("cold", as a decode step reading each layer once), each captured with programmatic dependent
launch (PDL) off and on (``revolta_kernels.tuning.set_pdl``):

- ``awq``: AWQ g128 int4 at M = 1 (and 4, 8): ``indep`` = the same activations into every call, distinct weights
  (back-to-back launches that do not depend on each other's data), ``chain`` = each call's output feeds the next
  (K x N alternates with N x K, as up/down projections do: the real decode dependency);
- ``dense``: the skinny fp16 GEMV against cuBLAS on Llama-3.1-8B's linears and lm_head (128256 x 4096), M = 1-8,
  and the down projection after the separate SiLU-and-mul kernel;
- ``llama8b``: the linears of Llama-3.1-8B's 32 distinct layers at batch 1 in decode order, chained: AWQ (down with
  and without the fused SiLU), fp16 skinny GEMV and fp16 cuBLAS, both after the separate SiLU;
- ``dense_sweep``: the fp16 GEMV's block shapes (warps, rows per block), M = 1 and 4; the best one is applied to
  the sections after it and reported as ``dense_tune`` (what ``--dense-tune`` takes);
- ``dense_norm`` / ``llama8b_norm`` / ``awq_norm``: the residual add + RMSNorm fused into the GEMV against the
  separate norm kernel + GEMV (common/gemv_norm.py).

% of copy = bytes / time / copy bandwidth, bytes = weights (packed int4 + scales + zeros for AWQ) + activations in
+ output. The ceiling for a kernel in a dependent chain is chain_ceiling.py's. ``--int8-activations`` is the
``int8_activations`` argument of every AWQ call (``awq``, ``llama8b``, ``awq_norm``, ``ncu``).

``ncu``: each decode-shape AWQ M=1 call launched ``--reps`` times on distinct weight copies, a small target for
Nsight Compute (``ncu --kernel-name regex:quant_gemv python benchmarks/gemv_bench.py ncu``).

    python benchmarks/gemv_bench.py run --sections awq,dense,llama8b --out bench_out/gemv_bench.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from common import tuning
from common.gemv import AWQ_SHAPES, DENSE_SHAPES, awq_bytes, awq_weights, both_pdl, copies, graph_us, l2_bytes
from common.gemv_norm import awq_norm_section, dense_norm_section, llama8b_norm_section
from common.timing import copy_gbs as copy_bandwidth

import revolta_kernels
from revolta_kernels import ops, ops_quant
from revolta_kernels import tuning as kernel_tuning

DEFAULT_SECTIONS = "awq,dense,llama8b"


def awq_section(copy_gbs: float, int8_activations: bool) -> list:
    rows = []
    a8 = {"int8_activations": int8_activations}
    for k, n in AWQ_SHAPES:
        nb = awq_bytes(k, n)
        c = max(copies(nb), 8)
        fwd = [awq_weights(k, n) for _ in range(c)]
        back = [awq_weights(n, k) for _ in range(c)]
        x = torch.randn(1, k, device="cuda").half()
        indep = both_pdl(lambda x=x, fwd=fwd: [lambda w=w: ops_quant.quant_matmul(x, *w, 4, 128, 0, **a8)
                                               for w in fwd * 2])
        state = {"h": x}

        def chain_calls(fwd=fwd, back=back, state=state):
            calls = []
            for wf, wb in zip(fwd, back, strict=True):
                calls.append(lambda wf=wf: state.__setitem__(
                    "y", ops_quant.quant_matmul(state["h"], *wf, 4, 128, 0, **a8)))
                calls.append(lambda wb=wb: state.__setitem__(
                    "h", ops_quant.quant_matmul(state["y"], *wb, 4, 128, 0, **a8)))
            return calls

        chain = both_pdl(chain_calls)
        chain_bytes = (awq_bytes(k, n) + awq_bytes(n, k)) / 2
        plan = kernel_tuning.quant_plan(1, n, k, 4, 128, torch.device("cuda"), int8_activations)
        row = {"K": k, "N": n, "bytes": nb, "plan": plan,
               "indep_us": indep, "chain_us_avg_of_KxN_and_NxK": chain,
               "indep_frac_copy": {key: nb / us / 1e3 / copy_gbs for key, us in indep.items()},
               "chain_frac_copy": {key: chain_bytes / us / 1e3 / copy_gbs for key, us in chain.items()}}
        for m in (4, 8):
            xm = torch.randn(m, k, device="cuda").half()
            kernel_tuning.set_pdl(True)
            us = graph_us([lambda w=w, xm=xm: ops_quant.quant_matmul(xm, *w, 4, 128, 0, **a8) for w in fwd])
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
            gemv = both_pdl(lambda x=x, ws=ws: [lambda w=w: ops_quant.dense_linear(x, w) for w in ws * 2])
            kernel_tuning.set_pdl(True)
            cublas = graph_us([lambda w=w, x=x: F.linear(x, w) for w in ws * 2])
            nbm = nb + m * (n + k) * 2
            row[f"m{m}"] = {"gemv_us": gemv, "cublas_us": cublas, "gemv_pdl_frac_copy": nbm / gemv["pdl"] / 1e3 / copy_gbs,
                            "cublas_frac_copy": nbm / cublas / 1e3 / copy_gbs, "speedup_pdl": cublas / gemv["pdl"]}
        if name == "down":  # silu_and_mul + the gemv vs silu_and_mul + F.linear
            for m in (1, 8):
                g = torch.randn(m, 2 * k, device="cuda").half()
                gemv_sep = graph_us([lambda w=w, g=g: ops_quant.dense_linear(ops.silu_and_mul(g), w) for w in ws * 2])
                sep = graph_us([lambda w=w, g=g: F.linear(ops.silu_and_mul(g), w) for w in ws * 2])
                row[f"m{m}_silu"] = {"silu_then_gemv_us": gemv_sep, "silu_then_cublas_us": sep}
        rows.append(row)
        r1 = row["m1"]
        print(f"fp16 {name:8s} {n:6d}x{k:6d} M=1: cuBLAS {r1['cublas_us']:6.1f} us ({100 * r1['cublas_frac_copy']:.0f}%), "
              f"gemv {r1['gemv_us']['nopdl']:6.1f} (no PDL) / {r1['gemv_us']['pdl']:6.1f} us "
              f"({100 * r1['gemv_pdl_frac_copy']:.0f}%); M=2: cuBLAS {row['m2']['cublas_us']:.1f}, "
              f"gemv {row['m2']['gemv_us']['pdl']:.1f} us" + (f"; silu + down M=1 {row['m1_silu']}" if "m1_silu" in row else ""),
              flush=True)
        del ws
    return rows


def dense_sweep(copy_gbs: float) -> dict:
    """fp16 GEMV block shapes (warps, rows per block) at M = 1 and 4, PDL on, back-to-back calls."""
    res: dict = {}
    ws = {(n, k): [(torch.randn(n, k, device="cuda") * 0.02).half() for _ in range(max(copies(n * k * 2), 4))]
          for n, k, _ in DENSE_SHAPES}
    for warps in (4, 8):
        for rows in (4, 8):
            # Tuning call site (as common/tuning.py): each swept block shape, process-wide until the next call.
            kernel_tuning.dense_tune(warps, rows)
            row = {}
            for m in (1, 4):
                for (n, k), wl in ws.items():
                    x = torch.randn(m, k, device="cuda").half()
                    us = graph_us([lambda w=w, x=x: ops_quant.dense_linear(x, w) for w in wl * 2])
                    row[f"m{m}_{n}x{k}"] = (n * k * 2 + m * (n + k) * 2) / us / 1e3 / copy_gbs
            row["m1_geomean"] = statistics.geometric_mean(v for key, v in row.items() if key.startswith("m1_"))
            res[f"{warps},{rows}"] = row
            print(f"fp16 gemv warps {warps} rows {rows}: % of copy " + " ".join(f"{key} {100 * v:.0f}"
                                                                            for key, v in row.items()), flush=True)
    best = max(res, key=lambda key: res[key]["m1_geomean"])
    res["best"] = best
    kernel_tuning.dense_tune(*(int(v) for v in best.split(",")))
    ws.clear()
    return res


def llama8b_section(copy_gbs: float, int8_activations: bool) -> dict:
    """32 layers of (qkv, o, gate_up, down) chained at batch 1, each output feeding the next projection."""
    res: dict = {}
    a8 = {"int8_activations": int8_activations}
    # AWQ
    q = [[awq_weights(4096, 6144), awq_weights(4096, 4096), awq_weights(4096, 28672), awq_weights(14336, 4096)]
         for _ in range(32)]
    st = {"h": torch.randn(1, 4096, device="cuda").half()}

    def awq_calls(fused: bool):
        calls = []
        for qkv, o, gu, down in q:
            calls.append(lambda w=qkv: st.__setitem__("a", ops_quant.quant_matmul(st["h"], *w, 4, 128, 0, **a8)))
            calls.append(lambda w=o: st.__setitem__(
                "h", ops_quant.quant_matmul(st["a"][:, :4096], *w, 4, 128, 0, **a8)))
            calls.append(lambda w=gu: st.__setitem__("g", ops_quant.quant_matmul(st["h"], *w, 4, 128, 0, **a8)))
            if fused:
                calls.append(lambda w=down: st.__setitem__(
                    "h", ops_quant.quant_matmul_silu(st["g"], *w, 4, 128, 0, **a8)))
            else:
                calls.append(lambda w=down: st.__setitem__(
                    "h", ops_quant.quant_matmul(ops.silu_and_mul(st["g"]), *w, 4, 128, 0, **a8)))
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
                calls += [lambda w=qkv: st.__setitem__("a", ops_quant.dense_linear(st["h"], w)),
                          lambda w=o: st.__setitem__("h", ops_quant.dense_linear(st["a"][:, :4096].contiguous(), w)),
                          lambda w=gu: st.__setitem__("g", ops_quant.dense_linear(st["h"], w)),
                          lambda w=down: st.__setitem__("h", ops_quant.dense_linear(ops.silu_and_mul(st["g"]), w))]
        return calls

    dense_bytes = 32 * sum(n * k * 2 for n, k, _ in DENSE_SHAPES)
    kernel_tuning.set_pdl(True)
    res["fp16_cublas_separate_silu_ms"] = graph_us(dense_calls("cublas")) * 128 / 1e3
    res["fp16_gemv_separate_silu_ms"] = {key: us * 128 / 1e3
                                         for key, us in both_pdl(lambda: dense_calls("gemv")).items()}
    res["fp16_bytes"] = dense_bytes
    res["awq_fused_pdl_frac_copy"] = awq_bytes_all / (res["awq_fused_ms"]["pdl"] * 1e-3) / 1e9 / copy_gbs
    res["fp16_gemv_pdl_frac_copy"] = dense_bytes / (res["fp16_gemv_separate_silu_ms"]["pdl"] * 1e-3) / 1e9 / copy_gbs
    res["fp16_cublas_frac_copy"] = dense_bytes / (res["fp16_cublas_separate_silu_ms"] * 1e-3) / 1e9 / copy_gbs
    d.clear()
    print("llama8b linears, 32 layers, batch 1 (ms per step):", json.dumps(res), flush=True)
    return res


def run(args: argparse.Namespace) -> dict:
    """The ``run`` sections named by ``args.sections``, in a fixed order."""
    copy_gbs = copy_bandwidth()
    result: dict = {"device": torch.cuda.get_device_name(), "copy_gbs": copy_gbs, "l2_bytes": l2_bytes(),
                    "pdl_available": kernel_tuning.set_pdl(True), "tuning": tuning.apply(args)}
    int8 = tuning.int8_activations(args)
    print(f"copy bandwidth {copy_gbs:.0f} GB/s; PDL available: {result['pdl_available']}", flush=True)
    sections = args.sections.split(",")
    if "awq" in sections:
        result["awq_m1"] = awq_section(copy_gbs, int8)
    if "dense_sweep" in sections:
        result["fp16_gemv_sweep"] = ds = dense_sweep(copy_gbs)
        result["dense_tune"] = ds["best"]
    if "dense" in sections:
        result["fp16_gemv"] = dense_section(copy_gbs)
    if "llama8b" in sections:
        result["llama8b_linears"] = llama8b_section(copy_gbs, int8)
    if "dense_norm" in sections:
        result["fp16_gemv_norm"] = dense_norm_section(copy_gbs)
    if "llama8b_norm" in sections:
        result["llama8b_norm"] = llama8b_norm_section(copy_gbs)
    if "awq_norm" in sections:
        result["llama8b_awq_norm"] = awq_norm_section(int8)
    return result


def ncu_target(args: argparse.Namespace) -> dict:
    """Each decode-shape AWQ M=1 call ``args.reps`` times on distinct weight copies (nothing timed)."""
    tuning.apply(args)
    a8 = {"int8_activations": tuning.int8_activations(args)}
    shapes = [("qkv_norm", 4096, 6144, 2), ("o", 4096, 4096, 0), ("gate_up_norm", 4096, 28672, 2),
              ("down_silu", 14336, 4096, 1), ("up", 4096, 14336, 0), ("down", 14336, 4096, 0)]
    res = torch.randn(1, 4096, device="cuda").half()
    g = (torch.randn(4096, device="cuda") * 0.1 + 1).half()
    for label, k, n, act in shapes:
        x = torch.randn(1, 2 * k if act == 1 else k, device="cuda").half()
        for w in [awq_weights(k, n) for _ in range(args.reps)]:
            if act == 0:
                ops_quant.quant_matmul(x, *w, 4, 128, 0, **a8)
            elif act == 1:
                ops_quant.quant_matmul_silu(x, *w, 4, 128, 0, **a8)
            else:
                ops_quant.quant_matmul_add_rms_norm(x, res, g, 1e-5, False, *w, 4, 128, 0, **a8)
        torch.cuda.synchronize()
        print(label, k, n, "done", flush=True)
    return {}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for name, fn, help_text in (("run", run, "the timed sections"), ("ncu", ncu_target, "a target for Nsight Compute")):
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(fn=fn)
        p.add_argument("--out", type=Path, default=Path(f"bench_out/gemv_{name}.json"))
        tuning.add_arguments(p)
        if name == "run":
            p.add_argument("--sections", default=DEFAULT_SECTIONS,
                           help="comma-separated: awq, dense_sweep, dense, llama8b, dense_norm, llama8b_norm, awq_norm")
        if name == "ncu":
            p.add_argument("--reps", type=int, default=2)
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    assert revolta_kernels.native_available(), revolta_kernels.native_status()
    result = args.fn(args)
    if args.command != "ncu":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
