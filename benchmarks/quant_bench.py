"""Benchmarks of the quantized GEMM (``revolta::quant_matmul``) against this GPU's ceilings, measured in one run.

Ceilings: copy bandwidth (a 2 GiB device-to-device copy, bytes read + written) and the fp16 matrix rate
(torch.matmul 8192^3). M = 1 reports GB/s with bytes = packed weights + scales + zeros + activations + output,
over the copy bandwidth, timed as CUDA-graph replays (as decode runs) in two ways: ``hot`` calls one weight
set repeatedly (up to 60 MB of it stays in L2), ``cold`` rotates through enough copies to exceed 3x the L2,
as a decode step that reads every layer once does. ``--sweep`` first times every skinny launch-plan variant
(warps per block, rows per step, waves) cold on every shape and every tensor-core tile variant at M = 4096,
then reports the table with the best of each (``quant_tune`` in the JSON: what ``--quant-tune`` takes).
``llama8b_linear_decode`` times the seven projections of Llama-3.1-8B's 32 distinct layers at batch 1 (merged
q/k/v and gate/up, AWQ g128) against the same fp16 matmuls: the weight-bound part of a decode step (attention,
norms and lm_head excluded). The launch overrides of common/tuning.py apply to everything it times, and
``--int8-activations`` is the ``int8_activations`` argument of every quantized call.

The skinny kernel is launched with programmatic dependent launch on sm_90+, so the graphs here measure
back-to-back PDL launches. gemv_bench.py reports the same shapes with PDL off and on, isolated and as chains of
dependent calls, and the fp16 skinny GEMV.

    python benchmarks/quant_bench.py --out bench_out/quant_bench.json
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import statistics
from pathlib import Path

import torch
from common import timing, tuning
from common.gemv import AWQ_SHAPES as SHAPES
from common.gemv import awq_bytes, awq_weights, copies

import revolta_kernels
from revolta_kernels import ops_quant
from revolta_kernels import tuning as kernel_tuning
from revolta_kernels.reference import quant as ref_quant

# (warps per block, rows per step, split policy: 1 = one wave floor / 0 = balanced whole waves, deferred scale)
GEMV_VARIANTS = list(itertools.product((4, 8), (4, 8), (1, 0), (0, 1)))
GEMM_VARIANTS = range(5)


time_ms = functools.partial(timing.time_ms, reps=15, inner=5, warmup=3)  # this benchmark's defaults


def graph_us(calls: list, min_calls: int = 40, reps: int = 10) -> float:
    """Microseconds per call of ``calls`` (cycled to at least ``min_calls``) captured in one CUDA graph."""
    seq = [calls[i % len(calls)] for i in range(max(min_calls, len(calls)))]
    g = timing.capture(seq)
    us = time_ms(g.replay, reps=reps, inner=1) * 1e3 / len(seq)
    del g
    return us


class Shape:
    """One (K, N) problem with a hot weight set, enough copies for cold timing, and activations; every quantized
    call passes ``int8_activations``."""

    def __init__(self, k: int, n: int, int8_activations: bool) -> None:
        self.k, self.n = k, n
        self.a8 = {"int8_activations": int8_activations}
        self.sets = [awq_weights(k, n) for _ in range(copies(awq_bytes(k, n)))]
        self.x = {m: torch.randn(m, k, device="cuda").half() for m in (1, 4, 8, 64)}
        w = ref_quant.dequantize(*self.sets[0], 4, 128, 0)
        self.ref = {m: ref_quant.activations(x, 4, int8_activations).float() @ w for m, x in self.x.items()}

    def rel_error(self, m: int) -> float:
        """Relative L2 error of the current launch plan against the float32 reference (NaN if unwritten)."""
        got = ops_quant.quant_matmul(self.x[m], *self.sets[0], 4, 128, 0, **self.a8).float()
        err = float(torch.linalg.norm(got - self.ref[m]) / torch.linalg.norm(self.ref[m]))
        return err if math.isfinite(err) else math.inf

    def skinny_us(self, m: int, cold: bool) -> float:
        x = self.x[m]
        sets = self.sets if cold else self.sets[:1]
        return graph_us([lambda s=s: ops_quant.quant_matmul(x, *s, 4, 128, 0, **self.a8) for s in sets])

    def dense_us(self, cold: bool) -> float:
        count = min(copies(self.k * self.n * 2), 8) if cold else 1
        dense = [torch.randn(self.k, self.n, device="cuda").half() for _ in range(count)]
        x = self.x[1]
        us = graph_us([lambda w=w: x @ w for w in dense])
        del dense
        return us

    def gemm_tflops(self, m: int = 4096) -> float:
        xb = torch.randn(m, self.k, device="cuda").half()
        ms = time_ms(lambda: ops_quant.quant_matmul(xb, *self.sets[0], 4, 128, 0, **self.a8), reps=6, inner=2,
                     warmup=2)
        return 2 * m * self.k * self.n / ms / 1e9

    def dense_gemm_tflops(self, m: int = 4096) -> float:
        xb = torch.randn(m, self.k, device="cuda").half()
        dense = torch.randn(self.k, self.n, device="cuda").half()
        return 2 * m * self.k * self.n / time_ms(lambda: xb @ dense, reps=6, inner=2, warmup=2) / 1e9


def sweep(shapes: list[Shape], copy_gbs: float) -> dict:
    """Cold M = 1 GB/s of every skinny variant and M = 4096 TFLOP/s of every GEMM tile variant."""
    gemv: dict[str, dict] = {}
    for w, u, waves, defer in GEMV_VARIANTS:
        # Tuning call site (as common/tuning.py): each swept launch plan, process-wide until the next call.
        kernel_tuning.quant_tune(w, u, waves, gemv_defer=defer)
        row, worst = {}, 0.0
        for sh in shapes:
            worst = max(worst, sh.rel_error(1), sh.rel_error(8))
            us = sh.skinny_us(1, cold=True)
            row[f"{sh.k}x{sh.n}"] = awq_bytes(sh.k, sh.n) / us / 1e3 / copy_gbs
        # A variant that computes the wrong thing is never "best": its geomean counts as 0.
        ok = worst < 5e-3
        row["geomean"] = math.exp(statistics.mean(math.log(v) for v in row.values())) if ok else 0.0
        row["max_rel_error"] = worst
        gemv[f"{w},{u},{waves},{defer}"] = row
        print(f"skinny warps {w} rows {u} policy {waves} defer {defer}: " + " ".join(f"{v:.3g}" for v in row.values()),
              flush=True)
    gemm: dict[str, dict] = {}
    for v in GEMM_VARIANTS:
        kernel_tuning.quant_tune(gemm_variant=v)
        gemm[str(v)] = {f"{sh.k}x{sh.n}": sh.gemm_tflops() for sh in shapes}
        if not all(sh.rel_error(64) < 5e-3 for sh in shapes):  # a wrong variant is never "best"
            gemm[str(v)] = {key: 0.0 for key in gemm[str(v)]}
        print(f"gemm variant {v}: " + " ".join(f"{t:.0f}" for t in gemm[str(v)].values()), flush=True)
    kernel_tuning.quant_tune()
    best_gemm = max(gemm, key=lambda v: statistics.geometric_mean(gemm[v].values()))
    return {"skinny_frac_copy_cold": gemv, "gemm_tflops": gemm, "best_gemm_variant": int(best_gemm)}


def llama8b_decode(int8_activations: bool) -> dict:
    layer = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]  # qkv, o, gate_up, down
    quant = [[awq_weights(k, n) for k, n in layer] for _ in range(32)]
    xs = {k: torch.randn(1, k, device="cuda").half() for k, _ in layer}
    calls = [lambda k=k, w=w: ops_quant.quant_matmul(xs[k], *w, 4, 128, 0, int8_activations=int8_activations)
             for lw in quant for (k, _n), w in zip(layer, lw, strict=True)]
    q_ms = graph_us(calls, reps=10) * len(calls) / 1e3
    del quant
    dense = [[torch.randn(k, n, device="cuda").half() * 0.01 for k, n in layer] for _ in range(32)]
    calls = [lambda k=k, w=w: xs[k] @ w for lw in dense for (k, _n), w in zip(layer, lw, strict=True)]
    d_ms = graph_us(calls, reps=10) * len(calls) / 1e3
    del dense
    qbytes = 32 * sum(awq_bytes(k, n) for k, n in layer)
    return {"awq_ms": q_ms, "fp16_ms": d_ms, "speedup": d_ms / q_ms, "awq_gbs": qbytes / q_ms / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench_out/quant_bench.json"))
    parser.add_argument("--sweep", action="store_true", help="time every launch variant and use the best")
    tuning.add_arguments(parser)
    args = parser.parse_args()
    assert revolta_kernels.native_available(), revolta_kernels.native_status()
    copy_gbs, mm = timing.copy_gbs(), timing.matmul_tflops()
    result: dict = {"device": torch.cuda.get_device_name(), "copy_gbs": copy_gbs, "fp16_matmul_tflops": mm,
                    "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size, "shapes": [],
                    "tuning": tuning.apply(args)}
    print(f"copy bandwidth {copy_gbs:.0f} GB/s, fp16 matmul {mm:.0f} TFLOP/s", flush=True)
    int8 = tuning.int8_activations(args)
    shapes = [Shape(k, n, int8) for k, n in SHAPES]
    if args.sweep:
        result["sweep"] = sweep(shapes, copy_gbs)
        best = max(result["sweep"]["skinny_frac_copy_cold"].items(), key=lambda kv: kv[1]["geomean"])[0]
        w, u, waves, defer = (int(p) for p in best.split(","))
        variant = result["sweep"]["best_gemm_variant"]
        result["quant_tune"] = (f"gemv_warps={w},gemv_rows={u},gemv_waves={waves},gemm_variant={variant},"
                                f"gemv_defer={defer}")
        args.quant_tune = result["quant_tune"]
        tuning.apply(args)
        print(f"best: skinny warps,rows,policy,defer = {best}; GEMM variant {variant}", flush=True)
    for sh in shapes:
        row: dict = {"K": sh.k, "N": sh.n, "bits": 4, "group": 128,
                     "m1_plan": kernel_tuning.quant_plan(1, sh.n, sh.k, 4, 128, torch.device("cuda"), int8)}
        for cold in (False, True):
            tag = "cold" if cold else "hot"
            us = sh.skinny_us(1, cold)
            row[f"m1_{tag}_us"] = us
            row[f"m1_{tag}_gbs"] = awq_bytes(sh.k, sh.n) / us / 1e3
            row[f"m1_{tag}_frac_copy_bw"] = row[f"m1_{tag}_gbs"] / copy_gbs
            row[f"m1_fp16_{tag}_us"] = sh.dense_us(cold)
        for m in (4, 8):
            us = sh.skinny_us(m, cold=True)
            row[f"m{m}_cold_us"] = us
            row[f"m{m}_cold_frac_copy_bw"] = awq_bytes(sh.k, sh.n, m) / us / 1e3 / copy_gbs
        row["m4096_tflops"] = sh.gemm_tflops()
        row["m4096_frac_matmul"] = row["m4096_tflops"] / mm
        row["m4096_fp16_tflops"] = sh.dense_gemm_tflops()
        result["shapes"].append(row)
        print(f"K={sh.k:6d} N={sh.n:6d}  M=1 hot {row['m1_hot_us']:6.1f} us {100 * row['m1_hot_frac_copy_bw']:4.0f}% "
              f"cold {row['m1_cold_us']:6.1f} us {100 * row['m1_cold_frac_copy_bw']:4.0f}% of copy "
              f"(fp16 hot {row['m1_fp16_hot_us']:.1f} cold {row['m1_fp16_cold_us']:.1f} us; M=8 cold "
              f"{100 * row['m8_cold_frac_copy_bw']:.0f}%)  M=4096: {row['m4096_tflops']:4.0f} TFLOP/s "
              f"({100 * row['m4096_frac_matmul']:.0f}% of matmul; dense {row['m4096_fp16_tflops']:.0f})", flush=True)
    del shapes
    torch.cuda.empty_cache()
    result["llama8b_linear_decode"] = llama8b_decode(int8)
    print("llama8b linear decode:", result["llama8b_linear_decode"], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
