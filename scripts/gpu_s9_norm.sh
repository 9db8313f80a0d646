#!/usr/bin/env bash
# Ninth session, run 1 (H200): the skinny GEMVs' warp-local staging with the fused norm's 1 / rms applied to the
# finished sums (no barrier for the sum of squares): quantized GPU tests (with the residual-stream magnitude
# cases), AWQ batch-1 decode twice (and once with the split-K-free kernel's old two-pass norm, flags 8), the
# decode timeline, the AWQ GEMV benchmarks. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
quant_tests 170
awq_e2e 1 ""
awq_e2e flags8 "0,0,1,-1,-1,-1,0,0,-1,8"
awq_e2e 2 ""
timeout 70 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline.json \
  >/tmp/v/timeline.log 2>&1; grep -E "tok/s|on the path" /tmp/v/timeline.log | head -8
timeout 90 python3 benchmarks/gemv_bench.py --sections awq,llama8b --out /tmp/v/gemv_bench.json >/tmp/v/gemv_bench.log 2>&1
echo "[${SECONDS}s] gemv_bench rc=$?"; grep -E "AWQ|llama8b" /tmp/v/gemv_bench.log
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
