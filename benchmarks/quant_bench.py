"""Benchmarks of the quantized GEMM (``revolta::quant_matmul``) against this GPU's ceilings, measured in one run.

Ceilings: copy bandwidth (a 2 GiB device-to-device copy, bytes read + written) and the fp16 matrix rate
(torch.matmul 8192^3). M = 1 reports GB/s with bytes = packed weights + scales + zeros + activations + output
over the copy bandwidth (timed as CUDA-graph replays, as decode runs); M = 4096 reports TFLOP/s over the
matmul rate and against torch.matmul with the dense fp16 weight. ``llama8b_linear_decode`` times the seven
projections of Llama-3.1-8B's 32 layers at batch 1 (merged q/k/v and gate/up, AWQ g128) against the same
fp16 matmuls: the weight-bound part of a decode step (attention, norms and lm_head excluded).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import revolta_kernels
from revolta_kernels import native_quant, ops_quant

SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096), (5120, 27648), (27648, 5120)]  # (K, N)


def time_ms(fn, reps: int = 15, inner: int = 5, warmup: int = 3) -> float:
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


def graphed(fn, n: int = 20):
    """``fn`` captured ``n`` times in one CUDA graph; the returned callable replays it (divide by n)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    return g.replay


def copy_bandwidth() -> float:
    x = torch.randn(2**29, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() * 4 / time_ms(lambda: y.copy_(x), reps=10, inner=3) / 1e6


def matmul_rate() -> float:
    n = 8192
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    return 2 * n**3 / time_ms(lambda: a @ b, reps=10, inner=5) / 1e9


def weights(k: int, n: int, group: int = 128):
    qweight = torch.randint(-(2**31), 2**31 - 1, (k // 8, n), dtype=torch.int32, device="cuda")
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n // 8), dtype=torch.int32, device="cuda")
    scales = (torch.rand(k // group, n, device="cuda") * 1e-3).half()
    return qweight, scales, qzeros


def bench_shape(k: int, n: int, copy_gbs: float, mm_tflops: float) -> dict:
    qweight, scales, qzeros = weights(k, n)
    row: dict = {"K": k, "N": n, "bits": 4, "group": 128}
    x1 = torch.randn(1, k, device="cuda").half()
    reps = 20
    replay = graphed(lambda: ops_quant.quant_matmul(x1, qweight, scales, qzeros, 4, 128, 0), reps)
    ms = time_ms(replay, reps=10, inner=1) / reps
    nbytes = qweight.numel() * 4 + scales.numel() * 2 + qzeros.numel() * 4 + k * 2 + n * 2
    row["m1_us"] = ms * 1e3
    row["m1_gbs"] = nbytes / ms / 1e6
    row["m1_frac_copy_bw"] = row["m1_gbs"] / copy_gbs
    row["m1_splits"] = native_quant.gemm_splits(1, n, k, 4, 128, x1.device)
    dense = torch.randn(k, n, device="cuda").half()
    replay_fp16 = graphed(lambda: x1 @ dense, reps)
    row["m1_fp16_us"] = time_ms(replay_fp16, reps=10, inner=1) / reps * 1e3
    del dense
    xb = torch.randn(4096, k, device="cuda").half()
    ms = time_ms(lambda: ops_quant.quant_matmul(xb, qweight, scales, qzeros, 4, 128, 0), reps=8, inner=2)
    row["m4096_tflops"] = 2 * 4096 * k * n / ms / 1e9
    row["m4096_frac_matmul"] = row["m4096_tflops"] / mm_tflops
    dense = torch.randn(k, n, device="cuda").half()
    row["m4096_fp16_tflops"] = 2 * 4096 * k * n / time_ms(lambda: xb @ dense, reps=8, inner=2) / 1e9
    return row


def llama8b_decode() -> dict:
    layer = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]  # qkv, o, gate_up, down
    quant = [weights(k, n) for k, n in layer]
    dense = [torch.randn(k, n, device="cuda").half() * 0.01 for k, n in layer]
    xs = {k: torch.randn(1, k, device="cuda").half() for k, _ in layer}

    def q_step():
        for _ in range(32):
            for (k, _n), (qw, s, z) in zip(layer, quant, strict=True):
                ops_quant.quant_matmul(xs[k], qw, s, z, 4, 128, 0)

    def d_step():
        for _ in range(32):
            for (k, _n), w in zip(layer, dense, strict=True):
                xs[k] @ w

    q_ms = time_ms(graphed(q_step, 1), reps=10, inner=1)
    d_ms = time_ms(graphed(d_step, 1), reps=10, inner=1)
    qbytes = 32 * sum(k * n // 2 + (k // 128) * n * 2 + (k // 128) * n // 2 for k, n in layer)
    return {"awq_ms": q_ms, "fp16_ms": d_ms, "speedup": d_ms / q_ms, "awq_weight_gbs": qbytes / q_ms / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    assert revolta_kernels.native_available(), revolta_kernels.native_status()
    copy_gbs, mm = copy_bandwidth(), matmul_rate()
    result: dict = {"device": torch.cuda.get_device_name(), "copy_gbs": copy_gbs, "fp16_matmul_tflops": mm,
                    "shapes": []}
    print(f"copy bandwidth {copy_gbs:.0f} GB/s, fp16 matmul {mm:.0f} TFLOP/s")
    for k, n in SHAPES:
        row = bench_shape(k, n, copy_gbs, mm)
        result["shapes"].append(row)
        print(f"K={k:6d} N={n:6d}  M=1: {row['m1_us']:7.1f} us {row['m1_gbs']:6.0f} GB/s "
              f"({100 * row['m1_frac_copy_bw']:.0f}% copy; fp16 {row['m1_fp16_us']:.1f} us)  "
              f"M=4096: {row['m4096_tflops']:5.0f} TFLOP/s ({100 * row['m4096_frac_matmul']:.0f}% of matmul; "
              f"dense fp16 {row['m4096_fp16_tflops']:.0f})", flush=True)
        torch.cuda.empty_cache()
    result["llama8b_linear_decode"] = llama8b_decode()
    print("llama8b linear decode:", result["llama8b_linear_decode"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
