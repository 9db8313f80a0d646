#!/usr/bin/env bash
# Session 33, run 2 (one GPU): library m34 = main 040cfa9 plus session 32's wide_d256.patch (the light decode
# kernel's 256-thread variant allowed for head_dim 256), against m33 (main 040cfa9's kernels).
# 1. Attention GPU tests with m34: default, the light kernel everywhere, and light + wide everywhere; the engine's
#    hybrid GPU tests (Qwen3.5 attention at head_dim 256 on the light kernel's path).
# 2. Qwen3.5-35B-A3B AWQ and Qwen3.5-27B AWQ batch 1, m33 / m34 interleaved (1024-token prompts, and 32 for 35B).
# 3. The on-path timeline of Qwen3.5-35B-A3B AWQ batch 1 with m34 (1024-token prompt).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m34 m33
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NEW=/tmp/libs/m34/librevolta_native.so
OLD=/tmp/libs/m33/librevolta_native.so
REVOLTA_NATIVE_LIB=$NEW gpu_tests attention 120 packages/revolta-kernels/tests/test_attention_gpu.py \
  packages/revolta-kernels/tests/test_rope_attention_gpu.py
REVOLTA_NATIVE_LIB=$NEW REVOLTA_DECODE_LIGHT=2 gpu_tests attention_light 90 \
  packages/revolta-kernels/tests/test_attention_gpu.py -k decode
REVOLTA_NATIVE_LIB=$NEW REVOLTA_DECODE_LIGHT=2 REVOLTA_DECODE_LIGHT_WIDE=1 gpu_tests attention_light_wide 90 \
  packages/revolta-kernels/tests/test_attention_gpu.py -k decode
REVOLTA_NATIVE_LIB=$NEW gpu_tests engine_hybrid 200 packages/revolta-engine/tests/test_gpu_hybrid.py \
  packages/revolta-engine/tests/test_gpu_quant_hybrid.py
hyb() {  # hyb LABEL CONFIG PROMPT_LEN [NAME=VALUE...]
  local label="$1" config="$2" n="$3"; shift 3
  env "$@" timeout 100 python3 benchmarks/hybrid_e2e.py --config "$config" --prompt-len "$n" \
    --out "/tmp/v/hybrid_$label.json" >"/tmp/v/hybrid_$label.log" 2>&1
  echo "[${SECONDS}s] hybrid $label rc=$? $(grep -hoE '"(batch1_decode_tok_s[a-z_]*|graph_forward_ms)": [0-9.-]+' \
    "/tmp/v/hybrid_$label.json" 2>/dev/null | tr '\n' ' ')"
}
A35=benchmarks/configs/qwen3.5-35b-a3b-awq
A27=benchmarks/configs/qwen3.5-27b-awq
for r in 1 2; do
  hyb "35b_new_$r" $A35 1024 REVOLTA_NATIVE_LIB=$NEW
  hyb "35b_old_$r" $A35 1024 REVOLTA_NATIVE_LIB=$OLD
done
hyb 35b_new_p32 $A35 32 REVOLTA_NATIVE_LIB=$NEW
hyb 35b_old_p32 $A35 32 REVOLTA_NATIVE_LIB=$OLD
hyb 27b_new $A27 1024 REVOLTA_NATIVE_LIB=$NEW
hyb 27b_old $A27 1024 REVOLTA_NATIVE_LIB=$OLD
REVOLTA_NATIVE_LIB=$NEW timeout 120 python3 benchmarks/decode_timeline.py --config $A35 --prompt-len 1024 --reps 3 \
  --out /tmp/v/timeline_35b.json > /tmp/v/timeline_35b.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -vE "^\s+\+" /tmp/v/timeline_35b.log | tail -30
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
