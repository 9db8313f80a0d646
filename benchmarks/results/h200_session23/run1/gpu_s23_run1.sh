#!/usr/bin/env bash
# Session 23, run 1 (H200): the stream-K partition of the skinny split-K kernel (tune flag 32, on by default in s23a).
# Its GPU tests, quant_bench with and without it (fp16 / int8 activations), the PDL chains A/B, Llama-8B AWQ batch 1
# interleaved (classic vs stream-K, both activation paths), then the other quantized-kernel and engine GPU tests.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs s23a
export REVOLTA_NATIVE_LIB=/tmp/libs/s23a/librevolta_native.so
T=packages/revolta-kernels/tests
gpu_tests streamk 120 $T/test_quant_streamk_gpu.py
for t in 6 38 22 54; do
  REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,$t" timeout 90 python3 benchmarks/quant_bench.py --out /tmp/v/qb_$t.json > /tmp/v/qb_$t.log 2>&1
  echo "[${SECONDS}s] quant_bench flags $t rc=$?"; grep -E "copy|M=1" /tmp/v/qb_$t.log
done
timeout 150 python3 benchmarks/gemv_flags_ab.py --flags 6,38,22,54 --chains llama8b_32_layers,4096x14336 --out /tmp/v/ab.json > /tmp/v/ab.log 2>&1
echo "[${SECONDS}s] flags ab rc=$?"; tail -12 /tmp/v/ab.log
AWQ=benchmarks/configs/llama-3.1-8b-awq
CL="REVOLTA_QUANT_TUNE=0,0,1,-1,-1,-1,0,0,-1,6"
for i in 1 2; do
  e2e "awq_classic_$i" $AWQ $CL
  e2e "awq_sk_$i" $AWQ
  e2e "awq_int8_classic_$i" $AWQ $CL REVOLTA_ACTIVATION_QUANT=int8
  e2e "awq_int8_sk_$i" $AWQ REVOLTA_ACTIVATION_QUANT=int8
done
e2e fp16 benchmarks/configs/llama-3.1-8b
gpu_tests quant 240 $T/test_quant_xq_gpu.py $T/test_quant_rope_gpu.py $T/test_quant_gpu.py $T/test_quant_norm_gpu.py \
  $T/test_quant_order_gpu.py
gpu_tests engine 150 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
