#!/usr/bin/env bash
# Session 32, run 1 (one GPU): library m32a (decode_merge.cuh: the two-pass split merge; the light decode kernel's
# next-tile K/V loads issued after the current tile's scores / P.V) against m32base (main 2d0a4e9's kernels).
# Attention GPU tests (default and with the light kernel everywhere); kernels_bench engine decode cases for both
# libraries (split sweep for m32a); Qwen3.5-35B-A3B AWQ batch 1 at 1024- and 32-token prompts, both libraries.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m32base m32a
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NEW=/tmp/libs/m32a/librevolta_native.so
BASE=/tmp/libs/m32base/librevolta_native.so
REVOLTA_NATIVE_LIB=$NEW gpu_tests attention 170 packages/revolta-kernels/tests/test_attention_gpu.py \
  packages/revolta-kernels/tests/test_rope_attention_gpu.py
REVOLTA_NATIVE_LIB=$NEW REVOLTA_DECODE_LIGHT=2 gpu_tests attention_light 120 \
  packages/revolta-kernels/tests/test_attention_gpu.py -k "decode and not prefill"
hyb() {  # hyb LABEL LIB PROMPT_LEN
  REVOLTA_NATIVE_LIB=$2 timeout 100 python3 benchmarks/hybrid_e2e.py --config benchmarks/configs/qwen3.5-35b-a3b-awq \
    --prompt-len "$3" --out "/tmp/v/hybrid_$1.json" >"/tmp/v/hybrid_$1.log" 2>&1
  echo "[${SECONDS}s] hybrid $1 rc=$? $(grep -hoE '"batch1_decode_tok_s": [0-9.]+' "/tmp/v/hybrid_$1.json" 2>/dev/null)"
}
hyb base_p1024 $BASE 1024
hyb new_p1024 $NEW 1024
REVOLTA_NATIVE_LIB=$BASE timeout 100 python3 benchmarks/kernels_bench.py --engine-only --no-split-sweep \
  --out /tmp/v/kb_base.json >/tmp/v/kb_base.log 2>&1
echo "[${SECONDS}s] kernels_bench base rc=$?"; grep -E "engine decode|light kernel" /tmp/v/kb_base.log
REVOLTA_NATIVE_LIB=$NEW timeout 150 python3 benchmarks/kernels_bench.py --engine-only \
  --out /tmp/v/kb_new.json >/tmp/v/kb_new.log 2>&1
echo "[${SECONDS}s] kernels_bench new rc=$?"; grep -E "engine decode|light kernel|even splits|fixed chunks" /tmp/v/kb_new.log
hyb new2_p1024 $NEW 1024
hyb base2_p1024 $BASE 1024
hyb new_p32 $NEW 32
hyb base_p32 $BASE 32
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
