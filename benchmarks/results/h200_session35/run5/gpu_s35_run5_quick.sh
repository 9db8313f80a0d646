#!/usr/bin/env bash
# Session 35, run 5 quick (the last ~2 minutes of device time): the short tile's GPU tests and one bench A/B.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m40
nvidia-smi --query-gpu=name --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m40/librevolta_native.so
gpu_tests sorted_gemm 40 packages/revolta-kernels/tests/test_quant_moe_gemm_gpu.py
for t in 0 1; do
  timeout 25 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only --tile $t --models Qwen3.5-35B-A3B \
    --out /tmp/v/sorted_t$t.json > /tmp/v/sorted_t$t.log 2>&1
  echo "[${SECONDS}s] sorted bench tile $t rc=$?"; grep -E "T= *(64|128|256|1024)" /tmp/v/sorted_t$t.log
done
pack_logs
