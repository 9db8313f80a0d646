#!/usr/bin/env bash
# Session 32, run 2 (one GPU): library m32b = run 1's m32a with the two-pass merge only above 8 splits and the light
# decode kernel's 256-thread variant allowed for head_dim 256, against m32base (main 2d0a4e9's kernels). Attention
# GPU tests; kernels_bench engine decode cases; Qwen3.5-35B-A3B AWQ batch 1 at a 1024-token prompt (both
# libraries); Llama-3.1-8B fp16 and AWQ (int8 activations) batch 1 with m32b (issue 6's 2.5x bar). Decode rates are per output token now
# (benchmarks/gpu_e2e.py decode_rates), the old difference-based rate beside them.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m32base m32b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NEW=/tmp/libs/m32b/librevolta_native.so
BASE=/tmp/libs/m32base/librevolta_native.so
REVOLTA_NATIVE_LIB=$NEW gpu_tests attention 120 packages/revolta-kernels/tests/test_attention_gpu.py \
  packages/revolta-kernels/tests/test_rope_attention_gpu.py
kb() {  # kb LABEL LIB [NAME=VALUE...]
  local label="$1" l="$2"; shift 2
  env REVOLTA_NATIVE_LIB=$l "$@" timeout 100 python3 benchmarks/kernels_bench.py --engine-only --no-split-sweep \
    --out "/tmp/v/kb_$label.json" >"/tmp/v/kb_$label.log" 2>&1
  echo "[${SECONDS}s] kernels_bench $label rc=$?"; grep -E "engine decode" "/tmp/v/kb_$label.log"
}
kb base $BASE
kb new $NEW
hyb() {  # hyb LABEL LIB PROMPT_LEN [NAME=VALUE...]
  local label="$1" l="$2" n="$3"; shift 3
  env REVOLTA_NATIVE_LIB=$l "$@" timeout 100 python3 benchmarks/hybrid_e2e.py \
    --config benchmarks/configs/qwen3.5-35b-a3b-awq --prompt-len "$n" --out "/tmp/v/hybrid_$label.json" \
    >"/tmp/v/hybrid_$label.log" 2>&1
  echo "[${SECONDS}s] hybrid $label rc=$? $(grep -hoE '"(batch1_decode_tok_s[a-z_]*|graph_forward_ms)": [0-9.-]+' \
    "/tmp/v/hybrid_$label.json" 2>/dev/null | tr '\n' ' ')"
}
hyb base_p1024 $BASE 1024
hyb new_p1024 $NEW 1024
e2e fp16 benchmarks/configs/llama-3.1-8b REVOLTA_NATIVE_LIB=$NEW
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_NATIVE_LIB=$NEW REVOLTA_ACTIVATION_QUANT=int8
grep -hoE '"batch1_decode_tok_s_by_difference": [0-9.]+' /tmp/v/e2e_*.json
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
