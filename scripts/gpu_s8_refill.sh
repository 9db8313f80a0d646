#!/usr/bin/env bash
# Eighth session, run 3 (H200): the M=1 skinny GEMV's refill schedule (each register set reloaded with the step
# two ahead as it is read): quantized GPU tests, the AWQ GEMV benchmarks, AWQ batch-1 decode twice and its
# timeline. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
quant_tests 150
timeout 90 python3 benchmarks/gemv_bench.py --sections awq,llama8b --out /tmp/v/gemv_bench.json >/tmp/v/gemv_bench.log 2>&1
echo "[${SECONDS}s] gemv_bench rc=$?"; grep -E "AWQ|llama8b" /tmp/v/gemv_bench.log
for round in 1 2; do
  timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only --concurrency 1 \
    --prefill-len 1024 --out "/tmp/v/awq_$round.json" >"/tmp/v/awq_$round.log" 2>&1
  echo "[${SECONDS}s] awq round $round rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$round.json" | tr '\n' ' ')"
done
timeout 70 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline.json \
  >/tmp/v/timeline.log 2>&1; grep -E "tok/s|on the path" /tmp/v/timeline.log | head -8
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
