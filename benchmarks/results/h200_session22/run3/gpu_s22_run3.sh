#!/usr/bin/env bash
# Session 22, run 3 (H200): the engine option activation_quant=int8 (REVOLTA_ACTIVATION_QUANT) end to end, the plan's
# int8_x report, and a sweep of the skinny launch plan under int8 activations (the cheaper inner loop may want other
# splits or block shapes): REVOLTA_QUANT_TUNE = warps,rows,waves,variant,defer,prefetch_kb,share,minb,full,flags.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs wz
export REVOLTA_NATIVE_LIB=/tmp/libs/wz/librevolta_native.so
T=packages/revolta-kernels/tests
gpu_tests quant 300 $T/test_quant_xq_gpu.py $T/test_quant_tune_state.py $T/test_quant_rope_gpu.py $T/test_quant_gpu.py \
  $T/test_quant_norm_gpu.py $T/test_quant_order_gpu.py
AWQ=benchmarks/configs/llama-3.1-8b-awq
declare -A SWEEP=([default]="" [waves2]="0,0,2,-1,-1,-1,0,0,-1,-1" [balanced]="0,0,0,-1,-1,-1,0,0,-1,-1"
                  [rows4]="0,4,1,-1,-1,-1,0,0,-1,-1" [share2]="0,0,1,-1,-1,-1,2,0,-1,-1")
for i in 1 2; do
  e2e "fp16_$i" benchmarks/configs/llama-3.1-8b
  e2e "awq_$i" $AWQ
  for name in default waves2 balanced rows4 share2; do
    e2e "int8_${name}_$i" $AWQ REVOLTA_ACTIVATION_QUANT=int8 REVOLTA_QUANT_TUNE="${SWEEP[$name]}"
  done
done
REVOLTA_ACTIVATION_QUANT=int8 timeout 60 python3 benchmarks/decode_timeline.py --config $AWQ --reps 3 \
  --out /tmp/v/timeline_int8.json > /tmp/v/timeline_int8.log 2>&1
echo "[${SECONDS}s] timeline int8 rc=$? $(grep -E 'tok/s' /tmp/v/timeline_int8.log | head -1)"
gpu_tests engine 150 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
