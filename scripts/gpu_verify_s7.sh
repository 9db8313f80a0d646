#!/usr/bin/env bash
# Seventh session's verification call (H200): gpu_verify_final.sh on main after the file splits (ops_attention,
# quant_gemv_plan.cuh, engine cache_setup, the benchmarks' shared helpers) and the Gated DeltaNet gdn_column_sums
# mend, then gemv_flags_ab over all four chains with two settings (the illegal address of session 6, mended in the
# benchmark's capture). Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
T_KTEST=200 bash "$ROOT/scripts/gpu_verify_final.sh"
cd "$ROOT"
timeout 120 python3 benchmarks/gemv_flags_ab.py --rounds 3 --flags 0,10 --out /tmp/v/flags_ab.json >/tmp/v/flags_ab.log 2>&1
echo "[${SECONDS}s] gemv_flags_ab 0,10 all chains rc=$?" | tee -a "$OUT/verify.log"
grep -vE "^\s*$" /tmp/v/flags_ab.log | tail -6 | tee -a "$OUT/verify.log"
cp /tmp/v/flags_ab.json "$OUT/flags_ab.json" 2>/dev/null || true
