#!/usr/bin/env bash
# Session 37, run 4 (one GPU). Library m46 = m45 without the SiLU-in-staging kernel and without a minimum of resident
# blocks in the launch bounds (m45's minimum of 1 let ptxas take 88 instead of 76 registers: 2 blocks per SM, the
# plain GEMMs 12-22% slower, run 3). The engine's sorted path: gate/up gathers each sorted row's token (x_rows),
# silu_and_mul, down writes its rows back in routed order (out_rows); no zero fills. "before" = m44 + main's Python.
# 1. GPU tests (m46).  2. ncu durations of one Qwen3.5-35B-A3B layer at 1024 tokens, before / after.
# 3. quant_moe_sorted_bench.py --sorted-only before / after.  4. Qwen3.5-35B-A3B AWQ 128 / 64 concurrent, TTFT.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m44 m46
NEW_PATH="$PYTHONPATH"
rm -rf /tmp/before && mkdir -p /tmp/before && tar xzf .devcarry/before_src.tgz -C /tmp/before
OLD_PATH="/tmp/site:$(ls -d /tmp/before/packages/*/src | tr '\n' ':')"
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
(export $(lib m46); gpu_tests sorted_gemm 200 $K/test_quant_moe_gemm_gpu.py $K/test_quant_moe_gpu.py
 gpu_tests engine_quant_hybrid 200 $E/test_gpu_quant_hybrid.py)
summ() {
  python3 - "$1" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
ki, vi = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
vals = [(float(r[vi].replace(",", "")) / 1e3, r[ki][:90]) for r in rows[1:] if r[ki] != "Kernel Name"]
for v, k in vals:
    if v > 5: print(f"  {v:8.1f} us  {k}")
print(f"  {sum(v for v, _ in vals):8.1f} us total ({len(vals)} kernels)")
PY
}
for v in before after; do
  if [ $v = before ]; then P="$OLD_PATH"; L=m44; else P="$NEW_PATH"; L=m46; fi
  env PYTHONPATH="$P" $(lib $L) timeout 100 ncu --clock-control none --nvtx --nvtx-include "profiled/" \
    --metrics gpu__time_duration.sum --csv python3 benchmarks/results/h200_session36/run3/sorted_profile.py 1024 \
    > $OUT/durations_$v.csv 2> /tmp/v/ncu_$v.err
  echo "[${SECONDS}s] durations $v rc=$?"; summ $OUT/durations_$v.csv
done
for v in before after; do
  if [ $v = before ]; then P="$OLD_PATH"; L=m44; else P="$NEW_PATH"; L=m46; fi
  env PYTHONPATH="$P" $(lib $L) timeout 60 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only \
    --out /tmp/v/sorted_$v.json > /tmp/v/sorted_$v.log 2>&1
  echo "[${SECONDS}s] sorted bench $v rc=$?"; grep -E "T= *(1|8|32|64|128|256|512|1024) " /tmp/v/sorted_$v.log | tr -s ' '
done
M=benchmarks/configs/qwen3.5-35b-a3b-awq
for v in before after; do
  if [ $v = before ]; then P="$OLD_PATH"; L=m44; else P="$NEW_PATH"; L=m46; fi
  for n in 128 64; do
    env PYTHONPATH="$P" $(lib $L) timeout 120 python3 benchmarks/gpu_e2e.py --config $M --concurrency $n \
      --input-len 64 --output-len 192 --prefill-len 1024 --out /tmp/v/conc_${n}_$v.json > /tmp/v/conc_${n}_$v.log 2>&1
    echo "[${SECONDS}s] conc $n $v rc=$? $(grep -hoE '"(concurrent[0-9]+_output_tok_s|prefill1024_tok_s)": [0-9.]+' /tmp/v/conc_${n}_$v.json | tr '\n' ' ')"
  done
  HYBRID_PROMPT_LEN=1024 hybrid_run ttft_$v $M PYTHONPATH="$P" $(lib $L)
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
