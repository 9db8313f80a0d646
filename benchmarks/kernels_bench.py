"""Benchmarks of the revolta-kernels attention ops against this GPU's own ceilings, measured in the same run.

Ceilings: copy bandwidth (a 2 GiB device-to-device copy, bytes read + written) and the fp16 matrix rate
(torch.matmul 8192^3). Decode reports GB/s over the copy bandwidth with bytes = KV read once + q + out;
prefill reports TFLOP/s (causal FLOPs counted exactly) over the matmul rate and against
torch.nn.functional.scaled_dot_product_attention on the same shapes. Timings are medians of CUDA-event
timed repetitions after warm-up; decode is timed as CUDA-graph replays, as an engine runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F

import revolta_kernels
from revolta_kernels import ops


def time_ms(fn, reps: int = 20, inner: int = 5, warmup: int = 3) -> float:
    """Median milliseconds per call of ``fn`` over ``reps`` event-timed batches of ``inner`` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def copy_bandwidth() -> float:
    x = torch.randn(2**29, device="cuda")  # 2 GiB
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x), reps=10, inner=3)
    return 2 * x.numel() * 4 / ms / 1e6  # GB/s


def matmul_rate() -> float:
    n = 8192
    a, b = (
        torch.randn(n, n, device="cuda", dtype=torch.float16),
        torch.randn(n, n, device="cuda", dtype=torch.float16),
    )
    ms = time_ms(lambda: a @ b, reps=10, inner=3)
    return 2 * n**3 / ms / 1e9  # TFLOP/s


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


def time_decode_graph(args) -> float:
    """Milliseconds per decode call, timed as CUDA-graph replays."""
    ops.paged_attention_decode(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.paged_attention_decode(*args)
    return time_ms(graph.replay, reps=30, inner=10)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="kernels_bench.json")
    parser.add_argument("--sweep", action="store_true", help="also time every kernel variant (kernels_sweep.py)")
    parser.add_argument(
        "--prefill-only", action="store_true", help="only the prefill case (and with --sweep its variants)"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    status = revolta_kernels.native_status()
    print(status, flush=True)
    copy_bw, mm = copy_bandwidth(), matmul_rate()
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
    decode_cases = [
        ("32x4K fp16", 32, 4096, torch.float16),
        ("32x4K int8", 32, 4096, torch.int8),
        ("32x4K fp8e4m3", 32, 4096, torch.float8_e4m3fn),
        ("1x128K fp16 split-K", 1, 131072, torch.float16),
        ("1x128K int8 split-K", 1, 131072, torch.int8),
    ]
    if args.prefill_only:
        decode_cases = []
    for name, n, ctx, dt in decode_cases:
        r = bench_decode(name, n, ctx, dt, copy_bw)
        results["decode"].append(r)
        print(
            f"decode {name:22s} {r['ms'] * 1e3:8.1f} us {r['GB/s']:7.0f} GB/s "
            f"{100 * r['frac_copy_bw']:5.1f}% of copy",
            flush=True,
        )
        torch.cuda.empty_cache()
    if decode_cases:
        dec = {r["case"]: r for r in results["decode"]}
        results["int8_speedup_32x4K"] = dec["32x4K fp16"]["ms"] / dec["32x4K int8"]["ms"]
        print(f"int8 speed-up over fp16 (32x4K): {results['int8_speedup_32x4K']:.2f}x", flush=True)
    r = bench_prefill(8192, mm)
    results["prefill"].append(r)
    print(
        f"{r['case']}: {r['ms']:.2f} ms {r['TFLOP/s']:.0f} TFLOP/s "
        f"({100 * r['frac_matmul']:.1f}% of matmul), SDPA {r['sdpa_TFLOP/s']:.0f} TFLOP/s {r['sdpa_ms']}, "
        f"ours/SDPA speed {r['speed_vs_sdpa']:.2f}, rel err vs SDPA {r['rel_err_vs_sdpa']:.2e}",
        flush=True,
    )
    if args.sweep:
        import kernels_sweep

        results["sweep"] = kernels_sweep.run(copy_bw, mm, prefill_only=args.prefill_only)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
