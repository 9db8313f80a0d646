#!/usr/bin/env bash
# Eighth session's verification call (H200): the dependent-chain streaming ceiling (benchmarks/chain_ceiling.py,
# its probe built here with nvcc), then gpu_verify_final.sh on main with the Gated DeltaNet gdn_column_sums mend
# re-applied (its GPU tests and the hybrid decode speed). Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p /tmp/v "$OUT"
cd "$ROOT"
timeout 200 python3 benchmarks/chain_ceiling.py --out /tmp/v/chain_ceiling.json >/tmp/v/chain_ceiling.log 2>&1
echo "[${SECONDS}s] chain_ceiling rc=$?"; tail -16 /tmp/v/chain_ceiling.log
T_KTEST=200 bash "$ROOT/scripts/gpu_verify_final.sh"
