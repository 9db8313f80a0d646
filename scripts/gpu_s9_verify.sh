#!/usr/bin/env bash
# Ninth session, run 5 (H200): main's library at the end of the session - the quantized GEMM/GEMV benchmark
# (M = 1 and M = 4096 against the measured copy bandwidth and fp16 matmul rate), then gpu_verify_final.sh (every
# kernel and engine GPU test, fp16 and AWQ Llama-3.1-8B end to end in one run, the hybrid MoE model).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p /tmp/v "$OUT"
cd "$ROOT"
timeout 90 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >/tmp/v/quant_bench.log 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; grep -vE "^\s*$" /tmp/v/quant_bench.log | tail -16
bash scripts/gpu_verify_final.sh
