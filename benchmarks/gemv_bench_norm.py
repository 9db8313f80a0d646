"""gemv_bench.py's ``dense_norm`` and ``llama8b_norm`` sections: the fp16 GEMV with the residual add + RMSNorm
fused in (``dense_linear_add_rms_norm``) against the separate ``fused_add_rms_norm`` kernel + GEMV, on the
projections a pre-norm feeds, and in Llama-8B's 32 layers with the residual stream."""

from __future__ import annotations

import json

import torch
from gemv_common import DENSE_SHAPES, both_pdl, copies, graph_us

from revolta_kernels import native_quant, ops, ops_quant

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
