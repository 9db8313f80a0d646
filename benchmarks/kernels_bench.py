"""Benchmarks of the revolta-kernels attention ops against this GPU's own ceilings, measured in the same run.

Ceilings: copy bandwidth (a 2 GiB device-to-device copy, bytes read + written) and the fp16 matrix rate
(torch.matmul 8192^3). Decode reports GB/s over the copy bandwidth with bytes = KV read once + q + out;
prefill reports TFLOP/s (causal FLOPs counted exactly) over the matmul rate and against
torch.nn.functional.scaled_dot_product_attention on the same shapes. Timings are medians of CUDA-event
timed repetitions after warm-up; decode is timed as CUDA-graph replays, as an engine runs it.

``--split-sweep`` also times the engine decode cases with every forced context split count and fixed chunk size
next to the occupancy model's plan. ``--ncu-target`` launches each case once, untimed, for Nsight Compute:

    python benchmarks/kernels_bench.py --out bench_out/kernels_bench.json
    ncu --kernel-name regex:"paged_" --section SpeedOfLight python benchmarks/kernels_bench.py --ncu-target
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from common import timing

import revolta_kernels
from revolta_kernels import ops

time_ms = functools.partial(timing.time_ms, reps=20, inner=5, warmup=3)  # this benchmark's defaults


def make_cache(num_blocks, hkv, bs, d, kv_dtype):
    shape = (num_blocks, hkv, bs, d)
    if kv_dtype == torch.int8:
        k = torch.randint(-127, 128, shape, device="cuda", dtype=torch.int8)
        return k, torch.rand(shape[:3], device="cuda") * 0.02 + 0.002
    return torch.randn(shape, device="cuda").to(kv_dtype), None


def attn_inputs(num_seqs, ctx, q_len, h, hkv, d, bs, kv_dtype):
    blocks_per = math.ceil(ctx / bs)
    nb = num_seqs * blocks_per
    tables = torch.randperm(nb, device="cuda", dtype=torch.int64).to(torch.int32).view(num_seqs, blocks_per)
    kc, ks = make_cache(nb, hkv, bs, d, kv_dtype)
    vc, vs = make_cache(nb, hkv, bs, d, kv_dtype)
    q = torch.randn(num_seqs * q_len, h, d, device="cuda", dtype=torch.float16)
    lens = torch.full((num_seqs,), ctx, dtype=torch.int32, device="cuda")
    qsl = torch.arange(0, num_seqs + 1, dtype=torch.int32, device="cuda") * q_len
    return (q, kc, vc, tables, lens, qsl, q_len, d**-0.5, ks, vs)


def decode_bytes(num_seqs, ctx, kv_dtype, h=32, hkv=8, d=128):
    """Bytes a decode step must move: K and V read once (plus int8 scales), q read and out written."""
    elem = torch.empty(0, dtype=kv_dtype).element_size()
    kv = 2 * num_seqs * ctx * hkv * d * elem + (2 * num_seqs * ctx * hkv * 4 if kv_dtype == torch.int8 else 0)
    return kv + 2 * num_seqs * h * d * 2


def graph_call_us(fn, calls: int = 8) -> float:
    """Microseconds per call of ``fn`` in graph replays of ``calls`` calls (``timing.graph_call_us`` with this
    benchmark's repetitions)."""
    return timing.graph_call_us(fn, calls, reps=30, inner=10)


def time_decode_graph(args, calls: int = 1) -> float:
    """Milliseconds per decode call (graph_call_us of ``calls`` calls per replay)."""
    return graph_call_us(lambda: ops.paged_attention_decode(*args), calls) / 1e3


def bench_decode(name, num_seqs, ctx, kv_dtype, copy_bw, h=32, hkv=8, d=128, bs=16):
    args = attn_inputs(num_seqs, ctx, 1, h, hkv, d, bs, kv_dtype)
    ms = time_decode_graph(args)
    gbs = decode_bytes(num_seqs, ctx, kv_dtype, h, hkv, d) / ms / 1e6
    return {
        "case": name,
        "kv_dtype": str(kv_dtype).replace("torch.", ""),
        "num_seqs": num_seqs,
        "ctx": ctx,
        "ms": ms,
        "GB/s": gbs,
        "frac_copy_bw": gbs / copy_bw,
    }


def engine_decode_inputs(lens, h, hkv, d, bs, kv_dtype, width_tokens):
    """Decode inputs as the engine's CUDA graphs see them: contexts ``lens`` inside a block table
    ``width_tokens`` wide (the graph bucket), one query token per sequence."""
    width = math.ceil(width_tokens / bs)
    per = [math.ceil(c / bs) for c in lens]
    nb = sum(per) + 1
    perm = torch.randperm(nb, device="cuda", dtype=torch.int64).to(torch.int32)
    tables = torch.zeros((len(lens), width), dtype=torch.int32, device="cuda")
    pos = 0
    for i, n in enumerate(per):
        tables[i, :n] = perm[pos : pos + n]
        pos += n
    kc, ks = make_cache(nb, hkv, bs, d, kv_dtype)
    vc, vs = make_cache(nb, hkv, bs, d, kv_dtype)
    n = len(lens)
    q = torch.randn(n, h, d, device="cuda", dtype=torch.float16)
    cl = torch.tensor(lens, dtype=torch.int32, device="cuda")
    qsl = torch.arange(0, n + 1, dtype=torch.int32, device="cuda")
    return (q, kc, vc, tables, cl, qsl, 1, d**-0.5, ks, vs)


def engine_decode_bytes(lens, kv_dtype, h, hkv, d):
    elem = torch.empty(0, dtype=kv_dtype).element_size()
    keys = sum(lens)
    kv = 2 * keys * hkv * d * elem + (2 * keys * hkv * 4 if kv_dtype == torch.int8 else 0)
    return kv + 2 * len(lens) * h * d * 2


def bench_engine_decode(copy_bw, sweep_splits: bool):
    """The decode attention calls the Llama-3.1-8B / Qwen3.5 engine makes (graph replays), optionally with
    every forced split count and chunk size (``native_attention.SPLIT_OVERRIDE`` / ``CHUNK_OVERRIDE``) next to
    the default plan."""
    from revolta_kernels import native_attention as attention_impl

    native_attention = attention_impl if revolta_kernels.native_available() else None
    gen = torch.Generator().manual_seed(1)
    b64 = torch.randint(512, 768, (64,), generator=gen).tolist()
    cases = [
        ("b1 ctx600 32/8 d128 fp16", [600], 32, 8, 128, torch.float16),
        ("b1 ctx600 32/8 d128 int8", [600], 32, 8, 128, torch.int8),
        ("b64 ctx512-767 32/8 d128 fp16", b64, 32, 8, 128, torch.float16),
        ("b64 ctx512-767 32/8 d128 int8", b64, 32, 8, 128, torch.int8),
        ("b8 ctx512-767 32/8 d128 fp16", b64[:8], 32, 8, 128, torch.float16),
        ("b16 ctx512-767 32/8 d128 fp16", b64[:16], 32, 8, 128, torch.float16),
        ("b1 ctx600 16/2 d256 fp16", [600], 16, 2, 256, torch.float16),
        ("b1 ctx1000 16/2 d256 fp16", [1000], 16, 2, 256, torch.float16),
        ("b1 ctx1900 16/2 d256 fp16", [1900], 16, 2, 256, torch.float16),
        ("b1 ctx1000 32/8 d128 fp16", [1000], 32, 8, 128, torch.float16),
        ("b1 ctx32K 32/8 d128 fp16", [32768], 32, 8, 128, torch.float16),
    ]
    out = []
    for name, lens, h, hkv, d, dt in cases:
        width = max(1024, 4 ** math.ceil(math.log(max(lens) / 1024, 4)) * 1024)  # the engine's graph widths
        args = engine_decode_inputs(lens, h, hkv, d, 16, dt, width)
        nbytes = engine_decode_bytes(lens, dt, h, hkv, d)
        ms = time_decode_graph(args, calls=8)
        ms1 = time_decode_graph(args)
        r = {"case": name, "mean_ctx": sum(lens) / len(lens), "table_width": width, "ms": ms, "ms_1call": ms1,
             "GB/s": nbytes / ms / 1e6, "frac_copy_bw": nbytes / ms / 1e6 / copy_bw}
        print(f"engine decode {name:32s} {ms * 1e3:8.1f} us {100 * r['frac_copy_bw']:5.1f}% of copy "
              f"(8 calls per graph replay; 1 call per replay: {ms1 * 1e3:.1f} us)", flush=True)
        if sweep_splits and native_attention is not None:
            for key, attr, values in (("splits_us", "SPLIT_OVERRIDE", (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)),
                                      ("chunks_us", "CHUNK_OVERRIDE", (64, 128, 192, 256, 320, 384, 512, 768))):
                r[key] = {}
                for v in values:
                    if attr == "CHUNK_OVERRIDE" and v >= max(lens):
                        continue
                    setattr(native_attention, attr, v)
                    try:
                        r[key][v] = time_decode_graph(args, calls=8) * 1e3
                    finally:
                        setattr(native_attention, attr, None)
                print(f"    {key} forced: " + ", ".join(f"{k}: {v:.1f}" for k, v in r[key].items()), flush=True)
        out.append(r)
        del args
        torch.cuda.empty_cache()
    return out


def _rotary_cache_case(n, h=32, hkv=8, d=128, bs=16):
    qkv = torch.randn(n, (h + 2 * hkv) * d, device="cuda", dtype=torch.float16)
    q = qkv[:, : h * d].view(n, h, d)
    k = qkv[:, h * d : (h + hkv) * d].view(n, hkv, d)
    v = qkv[:, (h + hkv) * d :].view(n, hkv, d)
    angles = torch.rand(8192, d // 2, device="cuda") * 100
    cs = torch.cat((angles.cos(), angles.sin()), -1)
    pos = torch.randint(0, 8192, (n,), device="cuda")
    kc, vc = (torch.zeros(4 * n + 4, hkv, bs, d, device="cuda", dtype=torch.float16) for _ in range(2))
    slots = torch.randperm((4 * n + 4) * bs, device="cuda")[:n]

    def separate():
        qr, kr = ops.rotary_embedding(pos, q, k, cs, True)
        ops.reshape_and_cache(kr, v, kc, vc, slots)

    def fused():
        ops.rotary_and_cache(pos, q, k, v, cs, True, kc, vc, slots)

    fns = {"rotary + reshape_and_cache": separate}
    if hasattr(ops, "rotary_and_cache"):
        fns["rotary_and_cache"] = fused
    r = {"num_tokens": n}
    for label, fn in fns.items():
        r[label + " us"] = graph_call_us(fn)
    return r


def bench_rotary_cache():
    """Rotary + KV-cache write of the Llama-3.1-8B attention (batch 1 and 64; graph replays): the fused
    op against the two separate ops."""
    out = []
    for n in (1, 64):
        r = _rotary_cache_case(n)
        print(f"rotary/cache batch {n}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "num_tokens"),
              flush=True)
        out.append(r)
    return out


def bench_prefill(seq, mm_rate, h=32, hkv=8, d=128, bs=16):
    q, kc, vc, tables, lens, qsl, _, scale, _, _ = attn_inputs(1, seq, seq, h, hkv, d, bs, torch.float16)
    args = (q, kc, vc, tables, lens, qsl, seq, scale, None, None)
    ms = time_ms(lambda: ops.paged_attention_prefill(*args), reps=10, inner=2)
    flops = 4 * d * h * seq * (seq + 1) / 2
    # SDPA on the same K/V, dense [1, heads, seq, d] (gathering from the cache is not timed for it).
    k = kc[tables[0].long()].permute(1, 0, 2, 3).reshape(1, hkv, -1, d)[:, :, :seq]
    v = vc[tables[0].long()].permute(1, 0, 2, 3).reshape(1, hkv, -1, d)[:, :, :seq]
    qd = q.transpose(0, 1).unsqueeze(0)
    k_rep, v_rep = (
        k.repeat_interleave(h // hkv, 1).contiguous(),
        v.repeat_interleave(h // hkv, 1).contiguous(),
    )
    sdpa_ms = {
        "repeat_kv": time_ms(
            lambda: F.scaled_dot_product_attention(qd, k_rep, v_rep, is_causal=True), reps=10, inner=2
        ),
    }
    try:
        kc_, vc_ = k.contiguous(), v.contiguous()
        sdpa_ms["enable_gqa"] = time_ms(
            lambda: F.scaled_dot_product_attention(qd, kc_, vc_, is_causal=True, enable_gqa=True),
            reps=10,
            inner=2,
        )
    except (RuntimeError, TypeError) as exc:  # older torch or no kernel for it
        sdpa_ms["enable_gqa_error"] = str(exc)[:200]
    best_sdpa = min(v for v in sdpa_ms.values() if isinstance(v, float))
    # correctness of this very run against SDPA (fp16 both; bound as in the tests)
    ours = ops.paged_attention_prefill(*args)
    ref = F.scaled_dot_product_attention(qd, k_rep, v_rep, is_causal=True)[0].transpose(0, 1)
    rel = float((ours.float() - ref.float()).norm() / ref.float().norm())
    tflops = flops / ms / 1e9
    return {
        "case": f"prefill causal {seq} tok {h}/{hkv} heads d{d}",
        "ms": ms,
        "TFLOP/s": tflops,
        "frac_matmul": tflops / mm_rate,
        "sdpa_ms": sdpa_ms,
        "sdpa_TFLOP/s": flops / best_sdpa / 1e9,
        "speed_vs_sdpa": best_sdpa / ms,
        "rel_err_vs_sdpa": rel,
    }


def ncu_target() -> None:
    """One untimed launch of each decode case (fp16 and int8 KV) and of the 8K prefill."""
    for kv in (torch.float16, torch.int8):
        ops.paged_attention_decode(*attn_inputs(32, 4096, 1, 32, 8, 128, 16, kv))
        torch.cuda.synchronize()
    q, kc, vc, tables, lens, qsl, _, scale, _, _ = attn_inputs(1, 8192, 8192, 32, 8, 128, 16, torch.float16)
    ops.paged_attention_prefill(q, kc, vc, tables, lens, qsl, 8192, scale, None, None)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench_out/kernels_bench.json"))
    parser.add_argument("--engine-only", action="store_true",
                        help="only the engine's decode shapes and the rotary/cache ops (no 4K/128K/prefill cases)")
    parser.add_argument("--prefill-only", action="store_true", help="only the prefill case")
    parser.add_argument("--split-sweep", action="store_true", help="also time forced split counts and chunk sizes")
    parser.add_argument("--ncu-target", action="store_true", help="launch each case once, untimed, for ncu")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.ncu_target:
        ncu_target()
        return
    status = revolta_kernels.native_status()
    print(status, flush=True)
    copy_bw, mm = timing.copy_gbs(), timing.matmul_tflops()
    print(f"ceilings: copy {copy_bw:.0f} GB/s, fp16 matmul {mm:.0f} TFLOP/s", flush=True)
    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "native": status,
        "copy_GB/s": copy_bw,
        "matmul_TFLOP/s": mm,
        "decode": [],
        "prefill": [],
    }
    if not args.prefill_only:
        results["engine_decode"] = bench_engine_decode(copy_bw, args.split_sweep)
        results["rotary_cache"] = bench_rotary_cache()
    if not args.engine_only:
        bench_standalone(results, copy_bw, mm, decode=not args.prefill_only)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))


def bench_standalone(results: dict, copy_bw: float, mm: float, decode: bool) -> None:
    """The 4K / 128K decode cases (when ``decode``) and the 8K causal prefill, into ``results``."""
    decode_cases = [
        ("32x4K fp16", 32, 4096, torch.float16),
        ("32x4K int8", 32, 4096, torch.int8),
        ("32x4K fp8e4m3", 32, 4096, torch.float8_e4m3fn),
        ("1x128K fp16 split-K", 1, 131072, torch.float16),
        ("1x128K int8 split-K", 1, 131072, torch.int8),
    ] if decode else []
    for name, n, ctx, dt in decode_cases:
        r = bench_decode(name, n, ctx, dt, copy_bw)
        results["decode"].append(r)
        print(f"decode {name:22s} {r['ms'] * 1e3:8.1f} us {r['GB/s']:7.0f} GB/s {100 * r['frac_copy_bw']:5.1f}% of copy",
              flush=True)
        torch.cuda.empty_cache()
    if decode_cases:
        dec = {r["case"]: r for r in results["decode"]}
        results["int8_speedup_32x4K"] = dec["32x4K fp16"]["ms"] / dec["32x4K int8"]["ms"]
        print(f"int8 speed-up over fp16 (32x4K): {results['int8_speedup_32x4K']:.2f}x", flush=True)
    r = bench_prefill(8192, mm)
    results["prefill"].append(r)
    print(f"{r['case']}: {r['ms']:.2f} ms {r['TFLOP/s']:.0f} TFLOP/s ({100 * r['frac_matmul']:.1f}% of matmul), "
          f"SDPA {r['sdpa_TFLOP/s']:.0f} TFLOP/s {r['sdpa_ms']}, ours/SDPA speed {r['speed_vs_sdpa']:.2f}, "
          f"rel err vs SDPA {r['rel_err_vs_sdpa']:.2e}", flush=True)


if __name__ == "__main__":
    main()
