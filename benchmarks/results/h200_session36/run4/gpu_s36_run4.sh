#!/usr/bin/env bash
# Session 36, run 4 (one GPU). Library m44 = main. The engine's sorted path sorts 16-bit keys (two radix passes, not
# eight) and puts the rows back with a gather (not index_copy_); run4/quant_moe_before.py is run 2's version (A/B).
# 1. GPU tests: the engine's quantized hybrid tests. 2. quant_moe_sorted_bench.py --sorted-only before / after.
# 3. ncu durations of one call at 1024 tokens. 4. Qwen3.5-35B-A3B AWQ 128 and 64 concurrent, TTFT at 1024 tokens.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m44
export $(lib m44)
E=packages/revolta-engine/tests
R=benchmarks/results/h200_session36
NEW_PATH="$PYTHONPATH"
rm -rf /tmp/before && cp -r packages /tmp/before
cp $R/run4/quant_moe_before.py /tmp/before/revolta-engine/src/revolta_engine/layers/quant_moe.py
OLD_PATH="/tmp/site:$(ls -d /tmp/before/*/src | tr '\n' ':')"
gpu_tests engine_quant_hybrid 200 $E/test_gpu_quant_hybrid.py
for v in before after; do
  if [ $v = before ]; then P="$OLD_PATH"; else P="$NEW_PATH"; fi
  PYTHONPATH="$P" timeout 60 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only --out /tmp/v/sorted_$v.json \
    > /tmp/v/sorted_$v.log 2>&1
  echo "[${SECONDS}s] sorted bench $v rc=$?"; grep -E "T= *(1|8|32|64|128|256|1024) " /tmp/v/sorted_$v.log | tr -s ' '
done
timeout 100 ncu --clock-control none --nvtx --nvtx-include "profiled/" --metrics gpu__time_duration.sum \
  --csv python3 $R/run3/sorted_profile.py 1024 > $OUT/durations_1024.csv 2> /tmp/v/ncu_dur.err
echo "[${SECONDS}s] durations rc=$?"
python3 - "$OUT/durations_1024.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
ki, vi = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
vals = [(float(r[vi].replace(",", "")) / 1e3, r[ki][:100]) for r in rows[1:] if r[ki] != "Kernel Name"]
for v, k in vals: print(f"  {v:8.1f} us  {k}")
print(f"  {sum(v for v, _ in vals):8.1f} us total")
PY
M=benchmarks/configs/qwen3.5-35b-a3b-awq
for n in 128 64; do
  timeout 120 python3 benchmarks/gpu_e2e.py --config $M --concurrency $n --input-len 64 --output-len 192 \
    --prefill-len 1024 --out /tmp/v/conc_$n.json > /tmp/v/conc_$n.log 2>&1
  echo "[${SECONDS}s] conc $n rc=$? $(grep -hoE '"(concurrent[0-9]+_output_tok_s|prefill1024_tok_s)": [0-9.]+' /tmp/v/conc_$n.json | tr '\n' ' ')"
done
export HYBRID_PROMPT_LEN=1024
hybrid_run after $M
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
