#!/usr/bin/env bash
# Ninth session, run 4 (H200): the fused norm's weight rows loaded before the PDL wait (split-K kernel and the
# 32-column split-K-free kernel): quantized GPU tests, AWQ batch 1 interleaved against the previous library
# (librevolta_prev.so = run 3's, under flags 6 = the new default), the probe-free timeline. Caller sets
# PYTHONPATH / REVOLTA_NATIVE_LIB (the new library).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
quant_tests 120
for round in 1 2; do
  awq_e2e "new_$round" ""
  REVOLTA_NATIVE_LIB=$ROOT/librevolta_prev.so awq_e2e "prev_$round" "0,0,1,-1,-1,-1,0,0,-1,6"
done
timeout 70 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline.json \
  >/tmp/v/timeline.log 2>&1; grep -E "tok/s|on the path" /tmp/v/timeline.log | head -8
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
