#!/usr/bin/env bash
# Eighth session, run 5 (H200): the three-blocks-per-SM M=1 skinny GEMV (quant_gemv_co3_kernel: 4-row steps with
# the refill schedule, <= 80 registers), taken with REVOLTA_QUANT_TUNE minb 3: the quantized GPU tests under that
# override, the AWQ GEMV benchmark with and without it, and Llama-3.1-8B AWQ batch-1 decode, interleaved.
# Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
# (Run from scripts/; kept here because the kernel it measures was reverted.)
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
CO3="0,4,1,-1,-1,-1,0,3,-1,-1"
REVOLTA_QUANT_TUNE="$CO3" timeout 150 $PYTEST packages/revolta-kernels/tests/test_quant_gpu.py \
  packages/revolta-kernels/tests/test_quant_norm_gpu.py packages/revolta-engine/tests/test_linear_quant_norm.py >"$OUT/tests.log" 2>&1
echo "[${SECONDS}s] GPU tests (minb 3) rc=$?"; tail -1 "$OUT/tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10
for tune in "$CO3" ""; do
  REVOLTA_QUANT_TUNE="$tune" timeout 60 python3 benchmarks/gemv_bench.py --sections awq --out "/tmp/v/gemv_${tune:+co3}.json" \
    >"/tmp/v/gemv_${tune:+co3}.log" 2>&1
  echo "[${SECONDS}s] gemv_bench tune='$tune' rc=$?"; grep -E "AWQ" "/tmp/v/gemv_${tune:+co3}.log"
done
e2e() { awq_e2e "$@"; }
e2e default_1 ""
e2e co3_1 "$CO3"
e2e default_2 ""
e2e co3_2 "$CO3"
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
