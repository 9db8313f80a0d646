#!/usr/bin/env bash
# Session 37, run 1 (one GPU). Libraries: m44 = main before this session (session 36's kernels), m45 = this session's
# sorted MoE GEMM with row maps (gate/up gathers each sorted row's token, down applies SiLU-and-mul while staging and
# writes its rows back in routed order, spare blocks zero the rows outside every expert's), m45b = m45 with the SiLU
# kernel compiled for 3 blocks per SM (80 registers, 4-12 B spills). "before" runs main's Python (before_src.tgz).
# 1. GPU tests (m45): the sorted GEMM (new row-map tests), the engine's quantized hybrid tests.
# 2. quant_moe_sorted_bench.py --sorted-only: before / m45 / m45b.  3. ncu durations of one layer at 1024 tokens (m45).
# 4. Qwen3.5-35B-A3B AWQ 128 / 64 concurrent and TTFT at 1024 tokens, before / after.
# 5. Issue 6's bars on this machine: Llama-3.1-8B fp16 / AWQ / AWQ int8 batch 1, quant_bench fp16 / int8.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m44 m45 m45b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NEW_PATH="$PYTHONPATH"
rm -rf /tmp/before && mkdir -p /tmp/before && tar xzf .devcarry/before_src.tgz -C /tmp/before
OLD_PATH="/tmp/site:$(ls -d /tmp/before/packages/*/src | tr '\n' ':')"
export $(lib m45)
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
R=benchmarks/results/h200_session36
gpu_tests sorted_gemm 200 $K/test_quant_moe_gemm_gpu.py
gpu_tests engine_quant_hybrid 200 $E/test_gpu_quant_hybrid.py
for v in before m45 m45b; do
  if [ $v = before ]; then P="$OLD_PATH"; L=m44; else P="$NEW_PATH"; L=$v; fi
  env PYTHONPATH="$P" $(lib $L) timeout 60 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only \
    --out /tmp/v/sorted_$v.json > /tmp/v/sorted_$v.log 2>&1
  echo "[${SECONDS}s] sorted bench $v rc=$?"; grep -E "T= *(1|8|32|64|128|256|512|1024) " /tmp/v/sorted_$v.log | tr -s ' '
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
for v in before after; do
  if [ $v = before ]; then P="$OLD_PATH"; L=m44; else P="$NEW_PATH"; L=m45; fi
  for n in 128 64; do
    env PYTHONPATH="$P" $(lib $L) timeout 120 python3 benchmarks/gpu_e2e.py --config $M --concurrency $n \
      --input-len 64 --output-len 192 --prefill-len 1024 --out /tmp/v/conc_${n}_$v.json > /tmp/v/conc_${n}_$v.log 2>&1
    echo "[${SECONDS}s] conc $n $v rc=$? $(grep -hoE '"(concurrent[0-9]+_output_tok_s|prefill1024_tok_s)": [0-9.]+' /tmp/v/conc_${n}_$v.json | tr '\n' ' ')"
  done
  HYBRID_PROMPT_LEN=1024 hybrid_run ttft_$v $M PYTHONPATH="$P" $(lib $L)
done
e2e fp16 benchmarks/configs/llama-3.1-8b
e2e awq benchmarks/configs/llama-3.1-8b-awq
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
timeout 60 python3 benchmarks/quant_bench.py --out /tmp/v/quant_fp16.json > /tmp/v/qb_fp16.log 2>&1
echo "[${SECONDS}s] quant_bench fp16 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_fp16.log
REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,22" timeout 60 python3 benchmarks/quant_bench.py \
  --out /tmp/v/quant_int8.json > /tmp/v/qb_int8.log 2>&1
echo "[${SECONDS}s] quant_bench int8 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_int8.log
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
