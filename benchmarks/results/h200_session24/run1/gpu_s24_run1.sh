#!/usr/bin/env bash
# Session 24, run 1 (H200): KV offload on a GPU. The offload GPU tests (bit-exact blocks back from CPU memory and
# files with CUDA graphs and asynchronous scheduling, fp16 and int8 caches), the engine's GPU tests (nothing else
# changed) and the speculative decoding / prompt logprobs GPU tests, then kv_offload_bench.py: time to first token of 2K and 8K prompts of the Llama-3.1-8B shape recomputed,
# hit in the GPU cache, and copied back from the CPU tier and from files. Library m24: main's kernels for sm_90.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m24
export REVOLTA_NATIVE_LIB=/tmp/libs/m24/librevolta_native.so
gpu_tests offload 240 packages/revolta-offload/tests/test_gpu_offload.py
gpu_tests engine 300 packages/revolta-engine/tests/test_gpu_engine.py packages/revolta-engine/tests/test_gpu_speculative.py
for n in 2048 8192; do
  timeout 240 python3 benchmarks/kv_offload_bench.py --config benchmarks/configs/llama-3.1-8b --prompt-len $n \
    --dir /tmp/v/kv_$n --out /tmp/v/kv_offload_$n.json > /tmp/v/kv_offload_$n.log 2>&1
  echo "[${SECONDS}s] kv_offload_bench $n rc=$?"; cat /tmp/v/kv_offload_$n.json 2>/dev/null || tail -20 /tmp/v/kv_offload_$n.log
  cp /tmp/v/kv_offload_$n.json "$OUT/" 2>/dev/null
  rm -rf /tmp/v/kv_$n
done
pack_logs
echo "[${SECONDS}s] done"
