#!/usr/bin/env bash
# Session 23, run 4 (H200): with int8 activations, plain (act 0) calls such as the o projection on the split-K kernel
# instead of the split-K-free one (tune flag 64, library s23o). Llama-8B AWQ batch 1 interleaved (flags 6 vs 70, with
# REVOLTA_ACTIVATION_QUANT=int8), the GEMV chains (flags 22 vs 86), the timeline with each, the int8 GPU tests.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs s23o
export REVOLTA_NATIVE_LIB=/tmp/libs/s23o/librevolta_native.so
AWQ=benchmarks/configs/llama-3.1-8b-awq
for i in 1 2 3; do
  for f in 6 70; do e2e "awq_int8_f${f}_$i" $AWQ REVOLTA_QUANT_TUNE=0,0,1,-1,-1,-1,0,0,-1,$f REVOLTA_ACTIVATION_QUANT=int8; done
done
timeout 120 python3 benchmarks/gemv_flags_ab.py --flags 22,86 --chains llama8b_32_layers,4096x4096 --out /tmp/v/ab.json > /tmp/v/ab.log 2>&1
echo "[${SECONDS}s] flags ab rc=$?"; tail -3 /tmp/v/ab.log
for f in 6 70; do
  REVOLTA_QUANT_TUNE=0,0,1,-1,-1,-1,0,0,-1,$f REVOLTA_ACTIVATION_QUANT=int8 timeout 120 python3 benchmarks/decode_timeline.py \
    --config $AWQ --prompt-len 1024 --reps 3 --out /tmp/v/timeline_f$f.json > /tmp/v/timeline_f$f.log 2>&1
  echo "[${SECONDS}s] timeline f$f rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_f$f.log | head -6
done
T=packages/revolta-kernels/tests
gpu_tests quant 200 $T/test_quant_xq_gpu.py $T/test_quant_gpu.py $T/test_quant_rope_gpu.py
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
