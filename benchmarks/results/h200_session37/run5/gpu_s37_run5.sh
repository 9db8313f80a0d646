#!/usr/bin/env bash
# Session 37, run 5 (one GPU; the last ~400 s of device time, so in order of need). Library m47 = m46 + the gate/up
# call's SiLU-and-mul epilogue (silu=True: each block holds 64 gate columns and their up columns, rounds the tile to
# fp16 in shared memory and writes silu(gate) * up, [R, N / 2]); the engine's sorted path then runs no silu_and_mul
# kernel. "before" = m46 + commit f183fab's Python (before2_src.tgz).
# 1. GPU tests (m47).  2. ncu durations of one Qwen3.5-35B-A3B layer at 1024 tokens, before / after.
# 3. quant_moe_sorted_bench.py --sorted-only --models Qwen3.5-35B-A3B before / after.  4. 128 concurrent, after / before.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m46 m47
NEW_PATH="$PYTHONPATH"
rm -rf /tmp/before && mkdir -p /tmp/before && tar xzf .devcarry/before2_src.tgz -C /tmp/before
OLD_PATH="/tmp/site:$(ls -d /tmp/before/packages/*/src | tr '\n' ':')"
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
(export $(lib m47); gpu_tests sorted_gemm 150 $K/test_quant_moe_gemm_gpu.py
 gpu_tests engine_quant_hybrid 150 $E/test_gpu_quant_hybrid.py)
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
  if [ $v = before ]; then P="$OLD_PATH"; L=m46; else P="$NEW_PATH"; L=m47; fi
  env PYTHONPATH="$P" $(lib $L) timeout 60 ncu --clock-control none --nvtx --nvtx-include "profiled/" \
    --metrics gpu__time_duration.sum --csv python3 benchmarks/results/h200_session36/run3/sorted_profile.py 1024 \
    > $OUT/durations_$v.csv 2> /tmp/v/ncu_$v.err
  echo "[${SECONDS}s] durations $v rc=$?"; summ $OUT/durations_$v.csv
done
for v in before after; do
  if [ $v = before ]; then P="$OLD_PATH"; L=m46; else P="$NEW_PATH"; L=m47; fi
  env PYTHONPATH="$P" $(lib $L) timeout 40 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only \
    --models Qwen3.5-35B-A3B --out /tmp/v/sorted_$v.json > /tmp/v/sorted_$v.log 2>&1
  echo "[${SECONDS}s] sorted bench $v rc=$?"; grep -E "T= *(1|8|64|256|1024) " /tmp/v/sorted_$v.log | tr -s ' '
done
pack_logs
M=benchmarks/configs/qwen3.5-35b-a3b-awq
for v in after before; do
  if [ $v = before ]; then P="$OLD_PATH"; L=m46; else P="$NEW_PATH"; L=m47; fi
  env PYTHONPATH="$P" $(lib $L) timeout 60 python3 benchmarks/gpu_e2e.py --config $M --concurrency 128 \
    --input-len 64 --output-len 192 --prefill-len 1024 --out /tmp/v/conc_128_$v.json > /tmp/v/conc_128_$v.log 2>&1
  echo "[${SECONDS}s] conc 128 $v rc=$? $(grep -hoE '"(concurrent[0-9]+_output_tok_s|prefill1024_tok_s)": [0-9.]+' /tmp/v/conc_128_$v.json | tr '\n' ' ')"
  pack_logs
done
echo "[${SECONDS}s] done"
