#!/usr/bin/env bash
# Session 33, run 1 (one GPU). Libraries: m33 = main 040cfa9's kernels (session 32's committed merge routing: one
# pass up to 8 splits, two passes above); m32b = m33 plus run2/wide_d256.patch of session 32 (the light kernel's
# 256-thread variant for head_dim 256); m32base = main 2d0a4e9's kernels (before session 32).
# 1. Attention GPU tests with m33 (default routing, and the light kernel everywhere): the committed routing's first GPU run.
# 2. Issue 6's bars with m33: Llama-3.1-8B fp16 / AWQ / AWQ int8-activation batch 1 (per-token decode rate), quant_bench.
# 3. Qwen3.5-35B-A3B AWQ batch 1 at a 1024-token prompt: m32base, m33, m32b, and m33 with the generic decode kernel
#    (REVOLTA_DECODE_LIGHT=0), the on-path A/B that kernels_bench suggested.
# 4. kernels_bench engine decode cases, m33 and m32b.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m33 m32b m32base
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
M33=/tmp/libs/m33/librevolta_native.so
WIDE=/tmp/libs/m32b/librevolta_native.so
BASE=/tmp/libs/m32base/librevolta_native.so
REVOLTA_NATIVE_LIB=$M33 gpu_tests attention 120 packages/revolta-kernels/tests/test_attention_gpu.py \
  packages/revolta-kernels/tests/test_rope_attention_gpu.py
REVOLTA_NATIVE_LIB=$M33 REVOLTA_DECODE_LIGHT=2 gpu_tests attention_light 90 \
  packages/revolta-kernels/tests/test_attention_gpu.py -k decode
e2e fp16 benchmarks/configs/llama-3.1-8b REVOLTA_NATIVE_LIB=$M33
e2e awq benchmarks/configs/llama-3.1-8b-awq REVOLTA_NATIVE_LIB=$M33
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_NATIVE_LIB=$M33 REVOLTA_ACTIVATION_QUANT=int8
grep -hoE '"batch1_decode_tok_s_by_difference": [0-9.]+' /tmp/v/e2e_*.json
REVOLTA_NATIVE_LIB=$M33 timeout 60 python3 benchmarks/quant_bench.py --out /tmp/v/quant_fp16.json > /tmp/v/qb_fp16.log 2>&1
echo "[${SECONDS}s] quant_bench fp16 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_fp16.log
REVOLTA_NATIVE_LIB=$M33 REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,22" timeout 60 python3 benchmarks/quant_bench.py \
  --out /tmp/v/quant_int8.json > /tmp/v/qb_int8.log 2>&1
echo "[${SECONDS}s] quant_bench int8 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_int8.log
hyb() {  # hyb LABEL [NAME=VALUE...]
  local label="$1"; shift
  env "$@" timeout 100 python3 benchmarks/hybrid_e2e.py --config benchmarks/configs/qwen3.5-35b-a3b-awq \
    --prompt-len 1024 --out "/tmp/v/hybrid_$label.json" >"/tmp/v/hybrid_$label.log" 2>&1
  echo "[${SECONDS}s] hybrid $label rc=$? $(grep -hoE '"(batch1_decode_tok_s[a-z_]*|graph_forward_ms)": [0-9.-]+' \
    "/tmp/v/hybrid_$label.json" 2>/dev/null | tr '\n' ' ')"
}
hyb m33 REVOLTA_NATIVE_LIB=$M33
hyb generic REVOLTA_NATIVE_LIB=$M33 REVOLTA_DECODE_LIGHT=0
hyb wide REVOLTA_NATIVE_LIB=$WIDE
hyb base REVOLTA_NATIVE_LIB=$BASE
hyb m33_2 REVOLTA_NATIVE_LIB=$M33
hyb generic_2 REVOLTA_NATIVE_LIB=$M33 REVOLTA_DECODE_LIGHT=0
kb() {  # kb LABEL LIB
  env REVOLTA_NATIVE_LIB=$2 timeout 80 python3 benchmarks/kernels_bench.py --engine-only --no-split-sweep \
    --out "/tmp/v/kb_$1.json" >"/tmp/v/kb_$1.log" 2>&1
  echo "[${SECONDS}s] kernels_bench $1 rc=$?"; grep -E "engine decode|light kernel" "/tmp/v/kb_$1.log"
}
kb m33 $M33
kb wide $WIDE
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
