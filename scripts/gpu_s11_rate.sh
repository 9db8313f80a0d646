#!/usr/bin/env bash
# Eleventh session, run 4 (H200): batch-1 decode measured the robust way (gpu_e2e.py now takes hybrid_e2e's
# decode_rate: an untimed generation at the prompt's length, then the median of three prefill-only / full pairs,
# where one pair gave run 3's 550 against 519 tok/s for the same library). main's library; Llama-3.1-8B fp16 and
# AWQ g128 interleaved, each AWQ run against the fp16 run before it. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
for round in 1 2 3; do
  timeout 90 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --decode-only --concurrency 1 \
    --prefill-len 1024 --out "/tmp/v/fp16_$round.json" >"/tmp/v/fp16_$round.log" 2>&1
  echo "[${SECONDS}s] fp16 $round rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/fp16_$round.json" | tr '\n' ' ')"
  timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only --concurrency 1 \
    --prefill-len 1024 --baseline "/tmp/v/fp16_$round.json" --out "/tmp/v/awq_$round.json" >"/tmp/v/awq_$round.log" 2>&1
  echo "[${SECONDS}s] awq $round rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline|speedup_over_baseline)": [0-9.]+' "/tmp/v/awq_$round.json" | tr '\n' ' ')"
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
