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
import math
import statistics

import torch
import torch.nn.functional as F

import revolta_kernels
from revolta_kernels import native_quant, ops, ops_quant

AWQ_SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096), (5120, 27648), (27648, 5120)]  # (K, N)
DENSE_SHAPES = [(6144, 4096, "qkv"), (4096, 4096, "o"), (28672, 4096, "gate_up"), (4096, 14336, "down")]  # N, K


def time_ms(fn, reps: int = 10, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def graph_us(seq: list) -> float:
    """Microseconds per call of the callables ``seq`` captured in order in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in seq:
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in seq:
            fn()
    us = time_ms(g.replay) * 1e3 / len(seq)
    del g
    return us


def copy_bandwidth() -> float:
    x = torch.randn(2**29, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() * 4 / time_ms(lambda: y.copy_(x)) / 1e6


def l2() -> int:
    return torch.cuda.get_device_properties(0).L2_cache_size


def awq_weights(k: int, n: int):
    qweight = torch.randint(-(2**31), 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda")
    qzeros = torch.full((k // 128, n // 8), -2004318072, dtype=torch.int32, device="cuda")  # zero 8 everywhere
    scales = (torch.rand(k // 128, n, device="cuda") * 2e-3 + 1e-3).half()
    return qweight, scales, qzeros


def awq_bytes(k: int, n: int, m: int = 1) -> int:
    return k * n // 2 + (k // 128) * n * 2 + (k // 128) * n // 2 + m * (k + n) * 2


def copies(nbytes: int) -> int:
    return max(2, math.ceil(3 * l2() / nbytes))


def both_pdl(build) -> dict:
    """``build()`` -> list of callables; per-call us with PDL off and on (captured separately)."""
    out = {}
    for on in (False, True):
        native_quant.set_pdl(on)
        out["pdl" if on else "nopdl"] = graph_us(build())
    native_quant.set_pdl(True)
    return out


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


NORM_SHAPES = [(6144, 4096, "llama qkv"), (28672, 4096, "llama gate_up"), (12352, 2048, "qwen3.5 gdn in_proj"),
               (9216, 2048, "qwen3.5 attn qkv")]  # (N, K): the projections a pre-norm feeds
NORM_EPS = 1e-6


def _norm_calls(ws, g, state, fused: bool, chain: bool, k: int):
    """Calls of (residual add + RMSNorm -> GEMV) on each weight; ``chain``: x = the previous output's first K
    columns and the residual = the previous h (the decoder's dependency), else the same x and residual."""
    calls = []
    for w in ws:
        if fused:
            def call(w=w):
                x = state["y"][:, :k] if chain else state["x"]
                state["y"], h = ops_quant.dense_linear_add_rms_norm(x, state["h"], g, NORM_EPS, True, w)
                if chain:
                    state["h"] = h
        else:
            def call(w=w):
                x = state["y"][:, :k] if chain else state["x"]
                normed, h = ops.fused_add_rms_norm(x, state["h"], g, NORM_EPS, True)
                state["y"] = ops_quant.dense_linear(normed, w, False)
                if chain:
                    state["h"] = h
        calls.append(call)
    return calls


def dense_norm_section(copy_gbs: float) -> dict:
    """The fp16 GEMV with the residual add + RMSNorm fused in (``dense_linear_add_rms_norm``) against the
    separate ``fused_add_rms_norm`` kernel + the GEMV (``fused`` = the default variant 1 and block shape,
    ``fused_v2`` = variant 2), per call in CUDA graphs, cold weights, PDL off / on;
    ``indep`` = same x and residual every call, ``chain`` (M=1) = each call's x and residual come from the
    previous call. Then the norm kernel alone (chained), and a block-shape sweep of the fused chain."""
    res: dict = {"shapes": []}
    for n, k, name in NORM_SHAPES:
        nb = n * k * 2
        ws = [(torch.randn(n, k, device="cuda") * 0.02).half() for _ in range(max(copies(nb), 4))]
        g = (torch.randn(k, device="cuda") * 0.1).half()
        row: dict = {"name": name, "N": n, "K": k, "weight_bytes": nb}
        variants = (("fused", True, 1), ("fused_v2", True, 2), ("separate", False, 1))
        for m in (1, 2):
            st = {"x": torch.randn(m, k, device="cuda").half(), "h": torch.randn(m, k, device="cuda").half(),
                  "y": torch.randn(m, n, device="cuda").half()}
            for label, fused, var in variants:
                native_quant.dense_norm_variant(var)
                row[f"m{m}_{label}_indep_us"] = both_pdl(
                    lambda fused=fused, st=st, ws=ws, g=g, k=k: _norm_calls(ws * 2, g, st, fused, False, k))
        for label, fused, var in variants:
            native_quant.dense_norm_variant(var)
            st = {"h": torch.randn(1, k, device="cuda").half(), "y": torch.randn(1, n, device="cuda").half()}
            row[f"m1_{label}_chain_us"] = both_pdl(
                lambda fused=fused, st=st, ws=ws, g=g, k=k: _norm_calls(ws * 2, g, st, fused, True, k))
        native_quant.dense_norm_variant(0)
        nbm = nb + (3 * k + n) * 2
        row["m1_chain_pdl_frac_copy"] = {v: nbm / row[f"m1_{v}_chain_us"]["pdl"] / 1e3 / copy_gbs
                                         for v in ("fused", "fused_v2", "separate")}
        row["m1_chain_pdl_saved_us"] = row["m1_separate_chain_us"]["pdl"] - row["m1_fused_chain_us"]["pdl"]
        sweep = {}
        for var in (2, 1):
            for warps, rows in ((8, 4), (4, 4), (8, 8), (4, 8)):
                native_quant.dense_norm_variant(var, warps, rows)  # the fused kernel's own block shape
                st = {"h": torch.randn(1, k, device="cuda").half(), "y": torch.randn(1, n, device="cuda").half()}
                sweep[f"v{var} {warps},{rows}"] = graph_us(_norm_calls(ws * 2, g, st, True, True, k))
                if var == 2:
                    native_quant.dense_tune(warps, rows)  # the unfused GEMV's
                    st = {"h": torch.randn(1, k, device="cuda").half(), "y": torch.randn(1, n, device="cuda").half()}
                    sweep[f"separate {warps},{rows}"] = graph_us(_norm_calls(ws * 2, g, st, False, True, k))
        native_quant.dense_tune()
        native_quant.dense_norm_variant(0)
        row["m1_chain_pdl_us_by_variant_warps_rows"] = sweep
        res["shapes"].append(row)
        def fmt(key, row=row):
            return "/".join(f"{row[f'{key.format(v)}']['pdl']:.2f}" for v in ("fused", "fused_v2", "separate"))

        print(f"norm+gemv {name:20s} {n:6d}x{k:5d} PDL, us, v1/v2/separate: M=1 chain {fmt('m1_{}_chain_us')} "
              f"(no PDL {row['m1_fused_chain_us']['nopdl']:.2f}/{row['m1_fused_v2_chain_us']['nopdl']:.2f}/"
              f"{row['m1_separate_chain_us']['nopdl']:.2f}); indep M=1 {fmt('m1_{}_indep_us')}, "
              f"M=2 {fmt('m2_{}_indep_us')}; chain by variant/shape {json.dumps({a: round(b, 2) for a, b in sweep.items()})}",
              flush=True)
        del ws
    for k in (2048, 4096):  # the norm kernel alone, chained through its residual output
        g = (torch.randn(k, device="cuda") * 0.1).half()
        st = {"x": torch.randn(1, k, device="cuda").half(), "h": torch.randn(1, k, device="cuda").half()}

        def norm_calls(st=st, g=g):
            def call():
                _, st["h"] = ops.fused_add_rms_norm(st["x"], st["h"], g, NORM_EPS, True)
            return [call] * 64

        res[f"fused_add_rms_norm_k{k}_chain_us"] = both_pdl(norm_calls)
        print(f"fused_add_rms_norm alone K={k}: {res[f'fused_add_rms_norm_k{k}_chain_us']}", flush=True)
    return res


def llama8b_norm_section(copy_gbs: float, layers: int = 32) -> dict:
    """Llama-3.1-8B's 32 layers at batch 1 with the residual stream: (add+norm, qkv, o, add+norm, gate_up, silu,
    down) with the norms as separate kernels vs fused into qkv / gate_up (ms per step, PDL off / on)."""
    hidden = DENSE_SHAPES[1][0]
    d = [[(torch.randn(n, k, device="cuda") * 0.02).half() for n, k, _ in DENSE_SHAPES] for _ in range(layers)]
    g1 = [(torch.randn(hidden, device="cuda") * 0.1 + 1).half() for _ in range(layers)]
    g2 = [(torch.randn(hidden, device="cuda") * 0.1 + 1).half() for _ in range(layers)]
    st = {"x": torch.randn(1, hidden, device="cuda").half(), "h": torch.randn(1, hidden, device="cuda").half()}

    def calls(fused: bool):
        out = []
        for (qkv, o, gu, down), a, b in zip(d, g1, g2, strict=True):
            if fused:
                def first(qkv=qkv, a=a):
                    st["a"], st["h"] = ops_quant.dense_linear_add_rms_norm(st["x"], st["h"], a, NORM_EPS, False, qkv)

                def third(gu=gu, b=b):
                    st["g"], st["h"] = ops_quant.dense_linear_add_rms_norm(st["x"], st["h"], b, NORM_EPS, False, gu)
            else:
                def first(qkv=qkv, a=a):
                    normed, st["h"] = ops.fused_add_rms_norm(st["x"], st["h"], a, NORM_EPS, False)
                    st["a"] = ops_quant.dense_linear(normed, qkv, False)

                def third(gu=gu, b=b):
                    normed, st["h"] = ops.fused_add_rms_norm(st["x"], st["h"], b, NORM_EPS, False)
                    st["g"] = ops_quant.dense_linear(normed, gu, False)
            out += [first, lambda o=o: st.__setitem__("x", ops_quant.dense_linear(st["a"][:, :hidden], o, False)),
                    third, lambda w=down: st.__setitem__("x", ops_quant.dense_linear(ops.silu_and_mul(st["g"]), w,
                                                                                      False))]
        return out

    res: dict = {}
    for label, fused, var in (("separate", False, 1), ("fused", True, 1), ("fused_v2", True, 2)):
        native_quant.dense_norm_variant(var)
        t = both_pdl(lambda fused=fused: calls(fused))
        res[f"{label}_norm_ms"] = {key: us * len(calls(fused)) / 1e3 for key, us in t.items()}
    native_quant.dense_norm_variant(0)
    res["bytes"] = layers * sum(n * k * 2 for n, k, _ in DENSE_SHAPES)
    res["fused_pdl_frac_copy"] = res["bytes"] / (res["fused_norm_ms"]["pdl"] * 1e-3) / 1e9 / copy_gbs
    res["separate_pdl_frac_copy"] = res["bytes"] / (res["separate_norm_ms"]["pdl"] * 1e-3) / 1e9 / copy_gbs
    d.clear()
    print("llama8b layers with the residual norms, batch 1 (ms per step):", json.dumps(res), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--sections", default="quant_sweep,awq,dense_sweep,dense,llama8b")
    args = ap.parse_args()
    assert revolta_kernels.native_available(), revolta_kernels.native_status()
    copy_gbs = copy_bandwidth()
    result: dict = {"device": torch.cuda.get_device_name(), "copy_gbs": copy_gbs, "l2_bytes": l2(),
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
