#!/usr/bin/env bash
# Session 26, run 1 (one H200): session 25's ready script (KV offload, speculative decoding with n-gram, a draft
# model and hybrid rollback, the engine and hybrid GPU tests, the 8K-token KV offload benchmark) plus issue 6's
# end-to-end figures in the same run (fp16, AWQ, AWQ with int8 activations). Library m24: main's kernels for sm_90
# (no kernel changed since session 23's 3ef7d74), carried in .devcarry.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m24
export REVOLTA_NATIVE_LIB=/tmp/libs/m24/librevolta_native.so
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
gpu_tests offload 120 packages/revolta-offload/tests/test_gpu_offload.py
gpu_tests spec 150 packages/revolta-engine/tests/test_gpu_speculative.py
gpu_tests engine 150 packages/revolta-engine/tests/test_gpu_engine.py packages/revolta-engine/tests/test_gpu_hybrid.py
e2e fp16 benchmarks/configs/llama-3.1-8b
e2e awq benchmarks/configs/llama-3.1-8b-awq
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
timeout 120 python3 benchmarks/kv_offload_bench.py --config benchmarks/configs/llama-3.1-8b --prompt-len 8192 \
  --dir /tmp/v/kv_8192 --out "$OUT/kv_offload_8192.json" > /tmp/v/kv_offload.log 2>&1
echo "[${SECONDS}s] kv_offload_bench rc=$?"; cat "$OUT/kv_offload_8192.json" 2>/dev/null || tail -20 /tmp/v/kv_offload.log
pack_logs
echo "[${SECONDS}s] done"
