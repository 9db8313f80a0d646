#!/usr/bin/env bash
# Session 25, run 1 (one H200): what session 24 left untested on a GPU (KV offload) and this session's GPU paths on
# one device: speculative decoding (n-gram, a draft model, hybrid rollback through the native Gated DeltaNet
# snapshots), prompt logprobs, and the engine and hybrid GPU tests. Library m24: main's kernels for sm_90 (no kernel
# changed since), built as in benchmarks/results/h200_session24/NOTES.md and carried in .devcarry.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m24
export REVOLTA_NATIVE_LIB=/tmp/libs/m24/librevolta_native.so
gpu_tests offload 240 packages/revolta-offload/tests/test_gpu_offload.py
gpu_tests spec 300 packages/revolta-engine/tests/test_gpu_speculative.py
gpu_tests engine 300 packages/revolta-engine/tests/test_gpu_engine.py packages/revolta-engine/tests/test_gpu_hybrid.py
timeout 240 python3 benchmarks/kv_offload_bench.py --config benchmarks/configs/llama-3.1-8b --prompt-len 8192 \
  --dir /tmp/v/kv_8192 --out "$OUT/kv_offload_8192.json" > /tmp/v/kv_offload.log 2>&1
echo "[${SECONDS}s] kv_offload_bench rc=$?"; cat "$OUT/kv_offload_8192.json" 2>/dev/null || tail -20 /tmp/v/kv_offload.log
pack_logs
echo "[${SECONDS}s] done"
