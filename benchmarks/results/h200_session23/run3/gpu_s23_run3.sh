#!/usr/bin/env bash
# Session 23, run 3 (H200): issue 6's bars on main's library (kernels unchanged since session 22; library s23m built
# from 269fde5): quant_bench with fp16 and int8 activations, Llama-3.1-8B fp16 / AWQ / AWQ int8 batch 1 interleaved
# (two rounds), GPTQ int4 with int8 activations, then the quantized-kernel and attention GPU tests.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs s23m
export REVOLTA_NATIVE_LIB=/tmp/libs/s23m/librevolta_native.so
for t in fp16x int8x; do
  tune=""; [ $t = int8x ] && tune="0,0,1,-1,-1,-1,0,0,-1,22"
  REVOLTA_QUANT_TUNE="$tune" timeout 90 python3 benchmarks/quant_bench.py --out /tmp/v/qb_$t.json > /tmp/v/qb_$t.log 2>&1
  echo "[${SECONDS}s] quant_bench $t rc=$?"; grep -E "copy|M=1" /tmp/v/qb_$t.log
done
AWQ=benchmarks/configs/llama-3.1-8b-awq
gptq_config /tmp/v/gptq False
for i in 1 2; do
  e2e "fp16_$i" benchmarks/configs/llama-3.1-8b
  e2e "awq_$i" $AWQ
  e2e "awq_int8_$i" $AWQ REVOLTA_ACTIVATION_QUANT=int8
done
e2e gptq_int8 /tmp/v/gptq REVOLTA_ACTIVATION_QUANT=int8
T=packages/revolta-kernels/tests
gpu_tests quant 240 $T/test_quant_xq_gpu.py $T/test_quant_rope_gpu.py $T/test_quant_gpu.py $T/test_quant_norm_gpu.py \
  $T/test_quant_order_gpu.py $T/test_attention_gpu.py $T/test_rope_attention_gpu.py
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
