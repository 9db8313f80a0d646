#!/usr/bin/env bash
# Session 22, run 7 (H200): after the review (one load_group, wsteps and row_of in the skinny body; zero-initialised integer sums):
# the quantized-kernel and engine GPU tests, and AWQ batch 1 with int8 activations once more.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs v7
export REVOLTA_NATIVE_LIB=/tmp/libs/v7/librevolta_native.so
T=packages/revolta-kernels/tests
gpu_tests quant 300 $T/test_quant_xq_gpu.py $T/test_quant_order_gpu.py $T/test_quant_rope_gpu.py $T/test_quant_gpu.py \
  $T/test_quant_norm_gpu.py
gpu_tests engine 150 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
e2e awq_none benchmarks/configs/llama-3.1-8b-awq
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
