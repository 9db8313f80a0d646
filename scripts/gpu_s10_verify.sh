#!/usr/bin/env bash
# Tenth session, run 4 (H200): main's library at the end of the session - the quantized GEMM/GEMV benchmark, then
# gpu_verify_final.sh (every kernel and engine GPU test, fp16 and AWQ Llama-3.1-8B end to end in one run, the
# hybrid MoE model), with AWQ batch 1 again by default and with each of this session's two changes turned off.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p /tmp/v "$OUT"
cd "$ROOT"
timeout 90 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >/tmp/v/quant_bench.log 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; grep -vE "^\s*$" /tmp/v/quant_bench.log | tail -16
T_KTEST=200 T_ETEST=170 AWQ_AB="REVOLTA_DECODE_LIGHT_WIDE=2 REVOLTA_DECODE_LIGHT_WIDE=0 REVOLTA_FUSED_QKV_ROPE=0" \
  bash scripts/gpu_verify_final.sh
