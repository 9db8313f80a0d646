#!/usr/bin/env bash
# Session 25 (for a 2-GPU machine, kind nvidia-h200-x2): tensor parallelism over NCCL. The GPU tensor-parallel
# tests (dense, AWQ, Qwen3.5 dense/MoE on two GPUs against float32 transformers), then tp_bench.py on the
# Llama-3.1-8B shape: batch-1 and batch-8 decode, 1K prefill and rank 0's weight bytes at tp 1 and tp 2. Library m24
# (main's kernels for sm_90, built as in benchmarks/results/h200_session24/NOTES.md), carried in .devcarry.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m24
export REVOLTA_NATIVE_LIB=/tmp/libs/m24/librevolta_native.so
gpu_tests tp 400 packages/revolta-engine/tests/test_gpu_tensor_parallel.py
timeout 400 python3 benchmarks/tp_bench.py --config benchmarks/configs/llama-3.1-8b --device cuda --tp 2 \
  --batch 1 8 --max-tokens 64 --prefill-len 1024 --out "$OUT/tp_bench_llama8b.json" > /tmp/v/tp_bench.log 2>&1
echo "[${SECONDS}s] tp_bench rc=$?"; cat "$OUT/tp_bench_llama8b.json" 2>/dev/null || tail -30 /tmp/v/tp_bench.log
pack_logs
echo "[${SECONDS}s] done"
