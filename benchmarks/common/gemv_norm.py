"""The fused residual add + RMSNorm GEMVs against the separate ``fused_add_rms_norm`` kernel + GEMV, on the
projections a pre-norm feeds and in Llama-3.1-8B's 32 layers with the residual stream (gemv_bench.py's
``dense_norm``, ``llama8b_norm`` and ``awq_norm`` sections)."""

from __future__ import annotations

import json

import torch

from common.gemv import DENSE_SHAPES, awq_weights, both_pdl, copies, graph_us
from revolta_kernels import ops, ops_quant
from revolta_kernels import tuning as kernel_tuning

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
                state["y"] = ops_quant.dense_linear(normed, w)
                if chain:
                    state["h"] = h
        calls.append(call)
    return calls


def dense_norm_section(copy_gbs: float) -> dict:
    """Per call in CUDA graphs, cold weights, PDL off / on: ``indep`` = the same x and residual every call (M = 1,
    2), ``chain`` (M = 1) = each call's x and residual come from the previous call; then the norm kernel alone,
    chained through its residual output."""
    res: dict = {"shapes": []}
    for n, k, name in NORM_SHAPES:
        nb = n * k * 2
        ws = [(torch.randn(n, k, device="cuda") * 0.02).half() for _ in range(max(copies(nb), 4))]
        g = (torch.randn(k, device="cuda") * 0.1).half()
        row: dict = {"name": name, "N": n, "K": k, "weight_bytes": nb}
        for label, fused in (("fused", True), ("separate", False)):
            for m in (1, 2):
                st = {"x": torch.randn(m, k, device="cuda").half(), "h": torch.randn(m, k, device="cuda").half(),
                      "y": torch.randn(m, n, device="cuda").half()}
                row[f"m{m}_{label}_indep_us"] = both_pdl(
                    lambda fused=fused, st=st, ws=ws, g=g, k=k: _norm_calls(ws * 2, g, st, fused, False, k))
            st = {"h": torch.randn(1, k, device="cuda").half(), "y": torch.randn(1, n, device="cuda").half()}
            row[f"m1_{label}_chain_us"] = both_pdl(
                lambda fused=fused, st=st, ws=ws, g=g, k=k: _norm_calls(ws * 2, g, st, fused, True, k))
        nbm = nb + (3 * k + n) * 2
        row["m1_chain_pdl_frac_copy"] = {v: nbm / row[f"m1_{v}_chain_us"]["pdl"] / 1e3 / copy_gbs
                                         for v in ("fused", "separate")}
        row["m1_chain_pdl_saved_us"] = row["m1_separate_chain_us"]["pdl"] - row["m1_fused_chain_us"]["pdl"]
        res["shapes"].append(row)
        print(f"norm+gemv {name:20s} {n:6d}x{k:5d} PDL us fused/separate: M=1 chain "
              f"{row['m1_fused_chain_us']['pdl']:.2f}/{row['m1_separate_chain_us']['pdl']:.2f}, indep M=1 "
              f"{row['m1_fused_indep_us']['pdl']:.2f}/{row['m1_separate_indep_us']['pdl']:.2f}, M=2 "
              f"{row['m2_fused_indep_us']['pdl']:.2f}/{row['m2_separate_indep_us']['pdl']:.2f}", flush=True)
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
    """Llama-3.1-8B's 32 layers at batch 1 with the residual stream, fp16: (add+norm, qkv, o, add+norm, gate_up,
    silu, down) with the norms as separate kernels vs fused into qkv / gate_up (ms per step, PDL off / on)."""
    hidden = DENSE_SHAPES[1][0]
    d = [[(torch.randn(n, k, device="cuda") * 0.02).half() for n, k, _ in DENSE_SHAPES] for _ in range(layers)]
    g1 = [(torch.randn(hidden, device="cuda") * 0.1 + 1).half() for _ in range(layers)]
    g2 = [(torch.randn(hidden, device="cuda") * 0.1 + 1).half() for _ in range(layers)]
    st = {"x": torch.randn(1, hidden, device="cuda").half(), "h": torch.randn(1, hidden, device="cuda").half()}

    def pre_norm(w, gw, dst: str, fused: bool) -> None:
        if fused:
            st[dst], st["h"] = ops_quant.dense_linear_add_rms_norm(st["x"], st["h"], gw, NORM_EPS, False, w)
        else:
            normed, st["h"] = ops.fused_add_rms_norm(st["x"], st["h"], gw, NORM_EPS, False)
            st[dst] = ops_quant.dense_linear(normed, w)

    def calls(fused: bool):
        out = []
        for (qkv, o, gu, down), a, b in zip(d, g1, g2, strict=True):
            out += [lambda w=qkv, a=a: pre_norm(w, a, "a", fused),
                    lambda o=o: st.__setitem__("x", ops_quant.dense_linear(st["a"][:, :hidden], o)),
                    lambda w=gu, b=b: pre_norm(w, b, "g", fused),
                    lambda w=down: st.__setitem__("x", ops_quant.dense_linear(ops.silu_and_mul(st["g"]), w))]
        return out

    res: dict = {}
    for label, fused in (("separate", False), ("fused", True)):
        t = both_pdl(lambda fused=fused: calls(fused))
        res[f"{label}_norm_ms"] = {key: us * len(calls(fused)) / 1e3 for key, us in t.items()}
    res["bytes"] = layers * sum(n * k * 2 for n, k, _ in DENSE_SHAPES)
    for label in ("fused", "separate"):
        res[f"{label}_pdl_frac_copy"] = res["bytes"] / (res[f"{label}_norm_ms"]["pdl"] * 1e-3) / 1e9 / copy_gbs
    d.clear()
    print("llama8b fp16 layers with the residual norms, batch 1 (ms per step):", json.dumps(res), flush=True)
    return res


def awq_norm_section(int8_activations: bool = False, layers: int = 32) -> dict:
    """Llama-3.1-8B's 32 layers of AWQ g128 linears at batch 1 in decode order (qkv 4096x6144, o 4096x4096,
    gate_up 4096x28672, down 14336x4096 with SiLU fused), the add + norm before qkv and gate_up as the separate
    ``fused_add_rms_norm`` kernel or fused into the skinny int4 kernel: ms per step, PDL on. ``int8_activations``:
    the quantized ops' argument of that name."""
    q = [[awq_weights(4096, 6144), awq_weights(4096, 4096), awq_weights(4096, 28672), awq_weights(14336, 4096)]
         for _ in range(layers)]
    ln = [((torch.rand(4096, device="cuda") + 0.5).half(), (torch.rand(4096, device="cuda") + 0.5).half())
          for _ in range(layers)]
    st = {"x": torch.randn(1, 4096, device="cuda").half() * 0.1, "r": torch.randn(1, 4096, device="cuda").half()}
    a8 = {"int8_activations": int8_activations}

    def pre_norm(w, lw, dst: str, fused: bool) -> None:
        if fused:
            st[dst], st["r"] = ops_quant.quant_matmul_add_rms_norm(st["x"], st["r"], lw, 1e-5, False, *w, 4, 128, 0,
                                                                   **a8)
        else:
            normed, st["r"] = ops.fused_add_rms_norm(st["x"], st["r"], lw, 1e-5, False)
            st[dst] = ops_quant.quant_matmul(normed, *w, 4, 128, 0, **a8)

    def calls(fused: bool):
        out = []
        for (qkv, o, gu, down), (ln1, ln2) in zip(q, ln, strict=True):
            out += [lambda w=qkv, lw=ln1: pre_norm(w, lw, "a", fused),
                    lambda w=o: st.__setitem__("x", ops_quant.quant_matmul(st["a"][:, :4096], *w, 4, 128, 0, **a8)),
                    lambda w=gu, lw=ln2: pre_norm(w, lw, "g", fused),
                    lambda w=down: st.__setitem__("x", ops_quant.quant_matmul_silu(st["g"], *w, 4, 128, 0, **a8))]
        return out

    kernel_tuning.set_pdl(True)
    res = {}
    for label, fused in (("separate_norm_ms", False), ("fused_norm_ms", True)):
        seq = calls(fused)
        res[label] = graph_us(seq) * len(seq) / 1e3
    q.clear()
    print(f"llama8b AWQ layers, batch 1: separate norm {res['separate_norm_ms']:.3f} ms, fused norm "
          f"{res['fused_norm_ms']:.3f} ms per step", flush=True)
    return res
