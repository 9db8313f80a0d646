#!/usr/bin/env bash
# Thirteenth session, final run (H200): main's library (kernels unchanged since session 11; run 1's cluster merge
# reverted) through quant_bench (issue 6's M = 1 and M = 4096 bars), then gpu_verify_final.sh without the kernel
# and GEMV benchmarks: every kernel and engine GPU test, fp16 and AWQ Llama-3.1-8B batch 1 in one run, the AWQ
# decode rate twice more, the decode timeline and the hybrid MoE model. Also the first GPU run of the benchmarks'
# shared ceilings (bench_timing.copy_gbs / matmul_tflops). Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p /tmp/v "$OUT"
cd "$ROOT"
timeout 150 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >"$OUT/quant_bench.log" 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; grep -vE "^\s*$" "$OUT/quant_bench.log" | tail -8
T_KTEST=200 T_ETEST=170 T_KBENCH=1 T_GEMV=1 T_MOE=100 AWQ_AB="REVOLTA_QUANT_TUNE= REVOLTA_PDL=1" \
  bash "$ROOT/scripts/gpu_verify_final.sh"
