"""Kernel-variant sweep for tuning the attention defaults in one GPU run (``kernels_bench.py --sweep``).

Times every alternative configuration the library exposes through ``set_attention_variant`` on the
benchmark shapes (decode 32 x 4K one-byte KV; prefill 8K causal, 32/8 heads, d128) and checks each one's
output against a reference, so a broken variant shows as an error instead of a fast time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from kernels_bench import attn_inputs, decode_bytes, time_decode_graph, time_ms

from revolta_kernels import native_attention, ops, reference

# (label, decode variant, forced context splits or None for the occupancy model)
DECODE_VARIANTS = [
    ("generic (decode.cuh)", 1, None),
    ("auto (frag where the probe passes)", 0, None),
    ("frag default: 4w, 2 stages, L2 prefetch", 8, None),
    ("frag default, 2 splits", 8, 2),
    ("frag 4w, 2 stages, no prefetch", 2, None),
    ("frag 4w, 3 stages, no prefetch", 3, None),
    ("frag 4w, 3 stages, prefetch", 7, None),
    ("frag 4w, 1 stage, prefetch, 3 blocks/SM", 4, None),
    ("frag 4w, 1 stage, prefetch, 3 blk, 3 splits", 4, 3),
    ("frag 8w, 2 stages, prefetch", 5, None),
    ("frag 8w, 2 stages, prefetch, 2 splits", 5, 2),
    ("frag 2w, 3 stages, prefetch, 4 blocks/SM", 6, None),
    ("frag 2w, 3 stages, prefetch, 2 splits", 6, 2),
]
PREFILL_VARIANTS = [
    ("generic (prefill.cuh)", 1),
    ("auto (frag where the probe passes)", 0),
    ("frag default: 8 warps x 2x16 rows, 48 keys, K/V split staging", 6),
    ("frag 4 warps x 2x16 rows, 32 keys, 2 buffers", 2),
    ("frag 8 warps x 16 rows, 64 keys", 3),
    ("frag 8 warps x 16 rows, 32 keys, 2 buffers", 4),
    ("frag 4 warps x 16 rows, 64 keys, 2 buffers, 2 blocks/SM", 5),
    ("frag 4 warps x 16 rows, 32 keys, 2 buffers, 2 blocks/SM", 7),
    ("frag 8 warps x 16 rows, 64 keys, Q in registers", 8),
    ("frag 8 warps x 16 rows, 32 keys, 2 buffers, Q in registers", 9),
    ("frag 4 warps x 16 rows, 32 keys, 2 buf, 2 blocks/SM, Q in regs", 10),
    ("frag 8 warps x 2x16 rows, 32 keys, K/V split staging", 11),
    ("frag 8 warps x 2x16 rows, 48 keys", 12),
    ("frag 8 warps x 2x16 rows, 48 keys, K/V split staging", 13),
    ("frag 4 warps x 2x16 rows, 64 keys, split, 2 blocks/SM", 14),
    ("frag 4 warps x 2x16 rows, 48 keys, split, 2 blocks/SM", 15),
    ("frag 4 warps x 2x16 rows, 32 keys, split, 2 blocks/SM", 16),
    ("frag 4 warps x 2x16 rows, 32 keys, 1 buffer, 2 blocks/SM", 17),
    ("frag 4 warps x 2x16 rows, 64 keys, split in halves, 2 blocks/SM", 18),
    ("frag 4 warps x 2x16 rows, 48 keys, split in halves, 2 blocks/SM", 19),
    ("frag 4 warps x 2x16 rows, 32 keys, split in halves, 2 blocks/SM", 20),
    ("frag 8 warps x 2x16 rows, 32 keys, split in halves", 21),
    ("frag 8 warps x 2x16 rows, 32 keys (default before run 2)", 22),
]


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.float(), want.float()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm())


def sweep_decode(copy_bw: float, kv_dtype: torch.dtype, variants=DECODE_VARIANTS, num_seqs=32, ctx=4096):
    args = attn_inputs(num_seqs, ctx, 1, 32, 8, 128, 16, kv_dtype)
    q, kc, vc, tables, lens, qsl, _, scale, ks, vs = args
    want = reference.paged_attention(q, kc, vc, tables, lens, qsl, scale, ks, vs)
    rows = []
    for label, variant, splits in variants:
        native_attention.set_attention_variant(variant, 0)
        native_attention.SPLIT_OVERRIDE = splits
        try:
            rel = _rel(ops.paged_attention_decode(*args), want)
            ms = time_decode_graph(args)
            gbs = decode_bytes(num_seqs, ctx, kv_dtype) / ms / 1e6
            row = {"variant": label, "us": ms * 1e3, "frac_copy_bw": gbs / copy_bw, "rel_err": rel}
        except RuntimeError as exc:
            row = {"variant": label, "error": str(exc)[:300]}
        finally:
            native_attention.set_attention_variant(0, 0)
            native_attention.SPLIT_OVERRIDE = None
        rows.append(row)
        print(f"  decode {str(kv_dtype):22s} {_fmt(row)}", flush=True)
    return rows


def sweep_prefill(mm_rate: float, seq=8192, h=32, hkv=8, d=128, bs=16):
    q, kc, vc, tables, lens, qsl, _, scale, _, _ = attn_inputs(1, seq, seq, h, hkv, d, bs, torch.float16)
    args = (q, kc, vc, tables, lens, qsl, seq, scale, None, None)
    k = kc[tables[0].long()].permute(1, 0, 2, 3).reshape(1, hkv, -1, d)[:, :, :seq]
    v = vc[tables[0].long()].permute(1, 0, 2, 3).reshape(1, hkv, -1, d)[:, :, :seq]
    qd = q.transpose(0, 1).unsqueeze(0)
    want = F.scaled_dot_product_attention(
        qd, k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1), is_causal=True
    )[0].transpose(0, 1)
    flops = 4 * d * h * seq * (seq + 1) / 2
    rows = []
    for label, variant in PREFILL_VARIANTS:
        native_attention.set_attention_variant(0, variant)
        try:
            rel = _rel(ops.paged_attention_prefill(*args), want)
            ms = time_ms(lambda: ops.paged_attention_prefill(*args), reps=10, inner=2)
            tf = flops / ms / 1e9
            row = {"variant": label, "ms": ms, "TFLOP/s": tf, "frac_matmul": tf / mm_rate, "rel_err_vs_sdpa": rel}
        except RuntimeError as exc:
            row = {"variant": label, "error": str(exc)[:300]}
        finally:
            native_attention.set_attention_variant(0, 0)
        rows.append(row)
        print(f"  prefill {_fmt(row)}", flush=True)
    return rows


def _fmt(row: dict) -> str:
    if "error" in row:
        return f"{row['variant']:58s} ERROR {row['error']}"
    if "us" in row:
        return (
            f"{row['variant']:42s} {row['us']:8.1f} us {100 * row['frac_copy_bw']:5.1f}% copy  "
            f"rel {row['rel_err']:.1e}"
        )
    return (
        f"{row['variant']:58s} {row['ms']:6.2f} ms {row['TFLOP/s']:6.0f} TFLOP/s "
        f"{100 * row['frac_matmul']:5.1f}% mm  rel {row['rel_err_vs_sdpa']:.1e}"
    )


def run(copy_bw: float, mm_rate: float, prefill_only: bool = False) -> dict:
    """Every sweep (or only the prefill one); returns the rows for the benchmark JSON."""
    dev = torch.cuda.current_device()
    ok, maps = native_attention.frag_layout_maps(dev)
    print(f"sweep: frag layout probe ok={ok}", flush=True)
    out: dict = {"frag_layout_ok": ok}
    if not ok:
        out["frag_layout_maps"] = maps
    if not prefill_only:
        out["decode_int8"] = sweep_decode(copy_bw, torch.int8)
        out["decode_fp8e4m3"] = sweep_decode(copy_bw, torch.float8_e4m3fn, DECODE_VARIANTS[:3])
    out["prefill"] = sweep_prefill(mm_rate)
    return out
