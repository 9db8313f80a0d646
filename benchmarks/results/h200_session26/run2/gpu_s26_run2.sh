#!/usr/bin/env bash
# Session 26, run 2 (one H200): the n-gram GPU test rewritten after run 1 (float32 exact equality, fp16 against
# float32 transformers with ties allowed), the KV offload benchmark again (file reads by a thread pool, loads through
# pinned memory), every engine GPU test (sessions 24-25 reworked Linear, the LM head and
# the attention layers for tensor parallelism), every kernel GPU test, and quant_bench for issue 6's table.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m24
export REVOLTA_NATIVE_LIB=/tmp/libs/m24/librevolta_native.so
gpu_tests engine 200 $(grep -l "mark.gpu" packages/revolta-engine/tests/*.py)
gpu_tests kernels 240 $(grep -l "mark.gpu" packages/revolta-kernels/tests/*.py)
timeout 60 python3 benchmarks/quant_bench.py --out "$OUT/quant_fp16.json" > /tmp/v/qb_fp16.log 2>&1
echo "[${SECONDS}s] quant_bench fp16 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_fp16.log
REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,22" timeout 60 python3 benchmarks/quant_bench.py --out "$OUT/quant_int8.json" > /tmp/v/qb_int8.log 2>&1
echo "[${SECONDS}s] quant_bench int8 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_int8.log
timeout 120 python3 benchmarks/kv_offload_bench.py --config benchmarks/configs/llama-3.1-8b --prompt-len 8192 \
  --dir /tmp/kv_8192 --out "$OUT/kv_offload_8192.json" > /tmp/v/kv_offload.log 2>&1
echo "[${SECONDS}s] kv_offload_bench rc=$?"; cat "$OUT/kv_offload_8192.json" 2>/dev/null || tail -20 /tmp/v/kv_offload.log
rm -rf /tmp/kv_8192  # gigabytes of block files: never packed
pack_logs
echo "[${SECONDS}s] done"
