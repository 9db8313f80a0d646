#!/usr/bin/env bash
# Session 30, run 6 (one GPU, the session's last seconds): main's final kernels (library m30t: the layout check
# revolta_struct_size included) load through the checked import, and the quantized MoE and routing GPU tests pass.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m30t
export REVOLTA_NATIVE_LIB=/tmp/libs/m30t/librevolta_native.so
gpu_tests routing_quant_moe 60 packages/revolta-kernels/tests/test_moe_routing_gpu.py \
  packages/revolta-kernels/tests/test_quant_moe_gpu.py packages/revolta-kernels/tests/test_native_status.py
echo "[${SECONDS}s] done"
