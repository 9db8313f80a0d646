#!/usr/bin/env bash
# Fifth session's verification call (H200): the GEMV schedule-flag A/B of the qgemv merge, then
# gpu_verify_final.sh with this session's switches as A/B runs. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p /tmp/v
timeout 60 python3 "$ROOT/benchmarks/gemv_flags_ab.py" --flags 0,2,10 --rounds 3 --out /tmp/v/gemv_flags_ab.json \
  >/tmp/v/gemv_flags_ab.log 2>&1
echo "gemv_flags_ab rc=$?"; tail -8 /tmp/v/gemv_flags_ab.log
T_KTEST=180 ENGINE_AB="REVOLTA_PDL=0" \
  AWQ_AB="REVOLTA_DECODE_LIGHT=0 REVOLTA_PDL=0 REVOLTA_PDL=0;REVOLTA_FUSED_ROPE=0 REVOLTA_QUANT_TUNE=0,0,1,-1,-1,-1,0,0,-1,2" \
  FP16_AB="REVOLTA_DECODE_LIGHT=0" bash "$ROOT/scripts/gpu_verify_final.sh"
