"""Benchmarks of the hybrid-model kernels against this GPU's copy bandwidth and against the references.

- Gated DeltaNet decode step (batch 32, 16 key / 32 value heads, 128x128 fp32 state per head): GB/s with bytes
  = every state read and written once + q/k/v/g/beta/out, over the copy bandwidth. Timed as CUDA-graph
  replays of 8 steps on disjoint slot sets of a 512-slot pool (1 GiB: no step finds its states in L2).
- Chunked prefill of 8K tokens (one sequence, same heads): native recurrent kernel vs the reference chunked
  path, both on this GPU with the same inputs (outputs compared).
- Causal conv1d decode update (batch 32, 8192 channels) and 8K prefill, native vs reference.
- MoE block at batch 1, Qwen3.5-35B-A3B shape (256 experts, top 8, hidden 2048, intermediate 512, gated
  shared expert 512): GB/s over the selected experts' weights, graph replays over 4 weight copies (6 GiB).
Usage: ``python benchmarks/hybrid_bench.py --out bench_out/hybrid_bench.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from common import timing

import revolta_kernels
from revolta_kernels import ops_gdn, ops_moe
from revolta_kernels.reference import conv1d as ref_conv
from revolta_kernels.reference import gdn as ref_gdn
from revolta_kernels.reference import moe as ref_moe

time_ms = functools.partial(timing.time_ms, reps=15, inner=1, warmup=2)  # this benchmark's defaults


def graphed(fns) -> Callable[[], None]:
    """All callables in ``fns`` captured in order into one CUDA graph; returns its replay."""
    return timing.capture(fns).replay


def _qkv(n, hk, hv, d, gen):
    fused = torch.randn(n, (2 * hk + hv) * d, device="cuda", generator=gen).half()
    q = fused[:, : hk * d].view(n, hk, d)
    k = fused[:, hk * d : 2 * hk * d].view(n, hk, d)
    v = fused[:, 2 * hk * d :].view(n, hv, d)
    g = -F.softplus(torch.randn(n, hv, device="cuda", generator=gen)) * 0.5
    beta = torch.sigmoid(torch.randn(n, hv, device="cuda", generator=gen)).half()
    return q, k, v, g, beta


def gdn_decode(bw: float, gen) -> dict:
    batch, hk, hv, d, sets = 32, 16, 32, 128, 8
    pool = torch.randn(batch * sets * 2, hv, d, d, device="cuda", generator=gen) * 0.1
    perm = torch.randperm(pool.shape[0], device="cuda", generator=gen)
    steps = [(_qkv(batch, hk, hv, d, gen), perm[i * batch:(i + 1) * batch].contiguous()) for i in range(sets)]
    state_bytes = 2 * batch * hv * d * d * 4
    io_bytes = batch * (2 * hk * d * 2 + 2 * hv * d * 2 + hv * (4 + 2))
    out: dict = {"batch": batch, "key_heads": hk, "value_heads": hv, "head_dim": d, "bytes": state_bytes + io_bytes}
    fns = [lambda a=a, s=s: ops_gdn.gated_delta_rule_decode(*a, pool, s, True) for a, s in steps]
    ms = time_ms(graphed(fns), reps=20) / sets
    one = [lambda a=a, s=s: ops_gdn.gated_delta_rule_decode(*(t[:1] for t in a), pool, s[:1], True)
           for a, s in steps]
    ms1 = time_ms(graphed(one), reps=20) / sets
    gbps = (state_bytes + io_bytes) / (ms / 1e3) / 1e9
    out.update({"us": ms * 1e3, "GBps": gbps, "fraction_of_copy": gbps * 1e9 / bw, "batch1_us": ms1 * 1e3})
    # the layer's fused step (gating + delta rule + gated norm), batch 32 and 1
    zs = [torch.randn(batch, 2 * hv + hv * d, device="cuda", generator=gen).half() for _ in range(sets)]
    a_log, dt_bias, w = (torch.randn(hv, device="cuda").half() - 2, torch.randn(hv, device="cuda").half(),
                         torch.ones(d, device="cuda").half())

    def fused(i, rows):
        (q, k, v, _, _), slots = steps[i]
        zb = zs[i][:rows]
        z = zb[:, 2 * hv:].view(rows, hv, d)
        return ops_gdn.gated_delta_rule_decode_fused(q[:rows], k[:rows], v[:rows], zb[:, :hv], zb[:, hv:2 * hv],
                                                        a_log, dt_bias, z, w, 1e-6, pool, slots[:rows], True)

    ms = time_ms(graphed([lambda i=i: fused(i, batch) for i in range(sets)]), reps=20) / sets
    ms2 = time_ms(graphed([lambda i=i: fused(i, 2) for i in range(sets)]), reps=20) / sets
    ms1 = time_ms(graphed([lambda i=i: fused(i, 1) for i in range(sets)]), reps=20) / sets
    out["fused_step"] = {"us": ms * 1e3, "fraction_of_copy": (state_bytes + io_bytes) / (ms / 1e3) / bw,
                         "batch2_us": ms2 * 1e3, "batch1_us": ms1 * 1e3}
    ref_ms = time_ms(lambda: ref_gdn.gated_delta_rule_recurrent(*steps[0][0], pool, steps[0][1], True), reps=5)
    out.update({"reference_us": ref_ms * 1e3, "speedup_vs_reference": ref_ms / (out["us"] / 1e3)})
    return out


def gdn_prefill(gen, tokens: int = 8192) -> dict:
    hk, hv, d = 16, 32, 128
    q, k, v, g, beta = _qkv(tokens, hk, hv, d, gen)
    pool = torch.zeros(2, hv, d, d, device="cuda")
    qsl = torch.tensor([0, tokens], dtype=torch.int32, device="cuda")
    idx = torch.tensor([1], device="cuda")
    empty = torch.zeros(0, dtype=torch.int64, device="cuda")

    def native():
        pool.zero_()
        return ops_gdn.gated_delta_rule_prefill(q, k, v, g, beta, pool, qsl, idx, True, empty, empty, empty)

    def reference():
        pool.zero_()
        return ref_gdn.gated_delta_rule_chunked(q, k, v, g, beta, pool, qsl, idx, True, empty, empty, empty)

    got, final = native(), pool[1].clone()
    want = reference()
    err = float((got.float() - want.float()).norm() / want.float().norm())
    state_err = float((final - pool[1]).norm() / pool[1].norm())
    ms, ref_ms = time_ms(native, reps=10), time_ms(reference, reps=3, warmup=1)
    return {"tokens": tokens, "key_heads": hk, "value_heads": hv, "head_dim": d, "native_ms": ms,
            "reference_ms": ref_ms, "speedup": ref_ms / ms, "tokens_per_s": tokens / (ms / 1e3),
            "rel_err_out": err, "rel_err_state": state_err}


def conv1d(bw: float, gen) -> dict:
    batch, c, width, tokens = 32, 8192, 4, 8192
    w = torch.randn(c, width, device="cuda", generator=gen).half()
    pool = torch.randn(256, c, width - 1, device="cuda", generator=gen).half()
    xs = [torch.randn(batch, c, device="cuda", generator=gen).half() for _ in range(8)]
    slots = [torch.randperm(256, device="cuda", generator=gen)[:batch] for _ in range(8)]
    fns = [lambda x=x, s=s: ops_gdn.causal_conv1d_update(x, w, None, pool, s, True) for x, s in zip(xs, slots, strict=True)]
    ms = time_ms(graphed(fns), reps=20) / 8
    nbytes = batch * c * (2 * (width - 1) * 2 + 2 * 2)
    ref_ms = time_ms(lambda: ref_conv.causal_conv1d_update(xs[0], w, None, pool, slots[0], True), reps=5)
    x = torch.randn(tokens, c, device="cuda", generator=gen).half()
    qsl = torch.tensor([0, tokens], dtype=torch.int32, device="cuda")
    idx = torch.tensor([3], device="cuda")
    empty = torch.zeros(0, dtype=torch.int64, device="cuda")
    pre_ms = time_ms(lambda: ops_gdn.causal_conv1d(x, w, None, pool, qsl, idx, True, empty, empty, empty), reps=10)
    pre_ref = time_ms(lambda: ref_conv.causal_conv1d(x, w, None, pool, qsl, idx, True, empty, empty, empty), reps=3)
    return {"update_us": ms * 1e3, "update_GBps": nbytes / (ms / 1e3) / 1e9,
            "update_fraction_of_copy": nbytes / (ms / 1e3) / bw, "update_reference_us": ref_ms * 1e3,
            "prefill8k_native_us": pre_ms * 1e3, "prefill8k_reference_us": pre_ref * 1e3,
            "prefill8k_speedup": pre_ref / pre_ms}


MOE_SHAPE = (256, 2048, 512, 8, 512, 4)  # Qwen3.5-35B-A3B: experts, hidden, intermediate, top_k, shared; copies


def moe_weights(gen) -> list[tuple]:
    """Random fp16 experts (w13, w2) and the gated shared expert of each weight copy, Qwen3.5-35B-A3B shape."""
    e, h, inter, _, i_s, copies = MOE_SHAPE
    weights = []
    for _ in range(copies):
        w13 = (torch.randn(e, 2 * inter, h, device="cuda", generator=gen) / h**0.5).half()
        w2 = (torch.randn(e, h, inter, device="cuda", generator=gen) / inter**0.5).half()
        shared = ((torch.randn(2 * i_s, h, device="cuda", generator=gen) / h**0.5).half(),
                  (torch.randn(h, i_s, device="cuda", generator=gen) / i_s**0.5).half(),
                  (torch.randn(1, h, device="cuda", generator=gen) / h**0.5).half())
        weights.append((w13, w2, shared))
    return weights


def moe(bw: float, gen) -> dict:
    e, h, inter, k, i_s, copies = MOE_SHAPE
    weights = moe_weights(gen)
    steps = [(torch.randn(1, h, device="cuda", generator=gen).half(),
              torch.randn(1, e, device="cuda", generator=gen).half()) for _ in range(8)]
    fns = [lambda i=i, x=x, lg=lg: ops_moe.moe_block(x, lg, weights[i % copies][0], weights[i % copies][1], k,
                                                       True, *weights[i % copies][2])
           for i, (x, lg) in enumerate(steps)]
    ms = time_ms(graphed(fns), reps=20) / len(fns)
    nbytes = (k * 3 * h * inter + 3 * h * i_s + h) * 2 + 2 * h * 2 + e * 2
    # the decode path as the model runs it: router GEMV kernel, then the block (a PDL chain on sm_90)
    routers = [(torch.randn(e, h, device="cuda", generator=gen) / h**0.5).half() for _ in range(copies)]
    fns_r = [lambda i=i, x=x: ops_moe.moe_block(x, ops_moe.moe_router(x, routers[i % copies]),
                                                   weights[i % copies][0], weights[i % copies][1], k, True,
                                                   *weights[i % copies][2])
             for i, (x, _) in enumerate(steps)]
    ms_r = time_ms(graphed(fns_r), reps=20) / len(fns_r)
    fns_g = [lambda i=i, x=x: ops_moe.moe_router(x, routers[i % copies]) for i, (x, _) in enumerate(steps)]
    ms_g = time_ms(graphed(fns_g), reps=20) / len(fns_g)
    nbytes_r = nbytes + e * h * 2
    w13, w2, shared = weights[0]
    x, lg = steps[0]
    got = ops_moe.moe_block(x, lg, w13, w2, k, True, *shared)
    want = ref_moe.moe_block(x, lg, w13, w2, k, True, *shared)
    ref_ms = time_ms(lambda: ref_moe.moe_block(x, lg, w13, w2, k, True, *shared), reps=5)
    gbps = nbytes / (ms / 1e3) / 1e9
    return {"experts": e, "top_k": k, "hidden": h, "intermediate": inter, "shared_intermediate": i_s,
            "us": ms * 1e3, "active_bytes": nbytes, "GBps": gbps, "fraction_of_copy": gbps * 1e9 / bw,
            "with_router_us": ms_r * 1e3, "with_router_fraction_of_copy": nbytes_r / (ms_r / 1e3) / bw,
            "router_alone_us": ms_g * 1e3, "router_fraction_of_copy": e * h * 2 / (ms_g / 1e3) / bw,
            "reference_us": ref_ms * 1e3, "speedup_vs_reference": ref_ms / ms,
            "rel_err_vs_reference": float((got.float() - want.float()).norm() / want.float().norm())}


def moe_chain(bw: float, gen, batches=(1, 2, 4, 8)) -> dict:
    """The whole MoE block as the model runs it at decode, Qwen3.5-35B-A3B shape: residual add + RMSNorm, router,
    up, down, as CUDA-graph replays of 8 steps over 4 weight copies (6 GiB: cold in L2), for each batch size,
    with the norm fused into the router (moe_router_norm) or as its own kernel (fused_add_rms_norm -> moe_router).
    Bytes = router + the distinct experts the step's tokens chose + shared expert +
    norm weight, each read once, + activations (x, residual in; h, normed, out written)."""
    e, h, inter, k, i_s, copies = MOE_SHAPE
    weights = [(w13, w2, shared, (torch.randn(e, h, device="cuda", generator=gen) / h**0.5).half(),
                (0.2 * torch.randn(h, device="cuda", generator=gen)).half())
               for w13, w2, shared in moe_weights(gen)]

    def fused(i, x, res):
        w13, w2, shared, wr, nw = weights[i % copies]
        logits, normed, hid = ops_moe.moe_router_norm(x, res, wr, nw, 1e-6, True)
        return ops_moe.moe_block(normed, logits, w13, w2, k, True, *shared), hid

    def unfused(i, x, res):
        w13, w2, shared, wr, nw = weights[i % copies]
        normed, hid = torch.ops.revolta.fused_add_rms_norm(x, res, nw, 1e-6, True)
        logits = ops_moe.moe_router(normed, wr)
        return ops_moe.moe_block(normed, logits, w13, w2, k, True, *shared), hid

    out: dict = {}
    for t in batches:
        steps = [(torch.randn(t, h, device="cuda", generator=gen).half(),
                  (4 * torch.randn(t, h, device="cuda", generator=gen)).half()) for _ in range(8)]
        nbytes = 0
        for i, (x, res) in enumerate(steps):
            logits, _, _ = ops_moe.moe_router_norm(x, res, weights[i % copies][3], weights[i % copies][4],
                                                      1e-6, True)
            distinct = int(torch.topk(logits.float(), k, dim=-1).indices.unique().numel())
            nbytes += (distinct * 3 * h * inter + 3 * i_s * h + h + e * h + h) * 2 + 5 * t * h * 2
        nbytes /= len(steps)
        row: dict = {"bytes_per_step": nbytes, "ideal_us_at_copy": nbytes / bw * 1e6}
        for chain_name, chain in (("fused_norm", fused), ("unfused_norm", unfused)):
            replay = graphed([lambda i=i, x=x, r=res, c=chain: c(i, x, r) for i, (x, res) in enumerate(steps)])
            us = time_ms(replay, reps=20) / len(steps) * 1e3
            del replay
            row[chain_name] = {"us": us, "fraction_of_copy": nbytes / (us / 1e6) / bw}
        out[f"batch{t}"] = row
        print(f"moe chain batch {t}: ideal {row['ideal_us_at_copy']:.1f} us; " + ", ".join(
            f"{kk} {v['us']:.1f} us ({100 * v['fraction_of_copy']:.0f}%)" for kk, v in row.items()
            if isinstance(v, dict)), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("bench_out/hybrid_bench.json"))
    ap.add_argument("--only", default="", help="comma-separated sections (gdn_decode, gdn_prefill_8k, conv1d, "
                    "moe_block_batch1, moe_chain); default all")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    bw = timing.copy_gbs() * 1e9  # bytes/s
    result: dict = {"gpu": torch.cuda.get_device_name(), "native": revolta_kernels.native_status(),
                    "copy_bandwidth_GBps": bw / 1e9}
    for name, fn in (("gdn_decode", lambda: gdn_decode(bw, gen)), ("gdn_prefill_8k", lambda: gdn_prefill(gen)),
                     ("conv1d", lambda: conv1d(bw, gen)), ("moe_block_batch1", lambda: moe(bw, gen)),
                     ("moe_chain", lambda: moe_chain(bw, gen))):
        if args.only and name not in args.only.split(","):
            continue
        try:
            result[name] = fn()
        except Exception:  # one failed section keeps the others' numbers
            result[name] = {"error": traceback.format_exc(limit=3)}
        torch.cuda.empty_cache()
        print(name, json.dumps(result[name]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    d, p, m = (result.get(n, {}) for n in ("gdn_decode", "gdn_prefill_8k", "moe_block_batch1"))
    fs = d.get("fused_step", {})
    if fs:
        print(f"fused GDN step us (b1 / b2 / b32): {fs['batch1_us']:.2f} / {fs['batch2_us']:.2f} / {fs['us']:.1f}")
    print(f"\ncopy {bw / 1e9:.0f} GB/s | GDN decode {d.get('us', 0):.1f} us = {100 * d.get('fraction_of_copy', 0):.1f}% "
          f"of copy | 8K prefill {p.get('native_ms', 0):.2f} ms vs ref {p.get('reference_ms', 0):.1f} ms = "
          f"{p.get('speedup', 0):.1f}x | MoE b1 {m.get('us', 0):.1f} us = {100 * m.get('fraction_of_copy', 0):.1f}% "
          f"(+ router {m.get('with_router_us', 0):.1f} us = {100 * m.get('with_router_fraction_of_copy', 0):.1f}%; "
          f"router alone {m.get('router_alone_us', 0):.1f} us)")


if __name__ == "__main__":
    main()
