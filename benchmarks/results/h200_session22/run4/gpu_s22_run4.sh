#!/usr/bin/env bash
# Session 22, run 4 (H200): main's final library (int8 activations up to 8 rows, split-K and split-K-free). Issue 6's
# bars in one run: quant_bench with the default fp16 activations and with int8 activations (flag 16), Llama-3.1-8B
# AWQ batch 1 with activation_quant none / int8 against fp16 in the same run, GPTQ int4 with int8 activations, then
# every quantized-kernel and engine GPU test.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs final
export REVOLTA_NATIVE_LIB=/tmp/libs/final/librevolta_native.so
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
gpu_tests quant 300 $T/test_quant_xq_gpu.py $T/test_quant_rope_gpu.py $T/test_quant_gpu.py $T/test_quant_norm_gpu.py \
  $T/test_quant_order_gpu.py
gpu_tests engine 150 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
