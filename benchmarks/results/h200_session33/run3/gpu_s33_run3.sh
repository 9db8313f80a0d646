#!/usr/bin/env bash
# Session 33, run 3 (one GPU): library m35 = main + the wide head_dim-256 light kernel (run 2) + the fused quantized
# MoE down projection and weighted sum (csrc/quant_moe_combine.cuh, revolta::quant_moe_down_combine).
# 1. GPU tests: the fused kernel against the reference and the two kernels it replaces; the engine's hybrid and
#    quantized hybrid tests (the fused op on Qwen3.5-MoE's decode path).
# 2. Qwen3.5-35B-A3B AWQ batch 1 (1024-token prompt), fused (REVOLTA_QUANT_MOE_FUSED_COMBINE=1, opt-in) against the
#    two kernels, interleaved. NOT RUN in session 33 (no machine); build m35 from main's kernels first:
#    scripts/build_variant_lib.sh m35 "".
# 3. Its on-path timeline with the fused kernel.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m35
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m35/librevolta_native.so
gpu_tests combine 120 packages/revolta-kernels/tests/test_quant_moe_combine_gpu.py
REVOLTA_QUANT_MOE_FUSED_COMBINE=1 gpu_tests engine_hybrid 120 packages/revolta-engine/tests/test_gpu_hybrid.py \
  packages/revolta-engine/tests/test_gpu_quant_hybrid.py
hyb() {  # hyb LABEL PROMPT_LEN [NAME=VALUE...]
  local label="$1" n="$2"; shift 2
  env "$@" timeout 100 python3 benchmarks/hybrid_e2e.py --config benchmarks/configs/qwen3.5-35b-a3b-awq \
    --prompt-len "$n" --out "/tmp/v/hybrid_$label.json" >"/tmp/v/hybrid_$label.log" 2>&1
  echo "[${SECONDS}s] hybrid $label rc=$? $(grep -hoE '"(batch1_decode_tok_s[a-z_]*|graph_forward_ms)": [0-9.-]+' \
    "/tmp/v/hybrid_$label.json" 2>/dev/null | tr '\n' ' ')"
}
for r in 1 2; do
  hyb "fused_$r" 1024 REVOLTA_QUANT_MOE_FUSED_COMBINE=1
  hyb "two_$r" 1024 REVOLTA_QUANT_MOE_FUSED_COMBINE=0
done
REVOLTA_QUANT_MOE_FUSED_COMBINE=1 timeout 120 python3 benchmarks/decode_timeline.py \
  --config benchmarks/configs/qwen3.5-35b-a3b-awq --prompt-len 1024 --reps 3 --out /tmp/v/timeline_35b.json \
  > /tmp/v/timeline_35b.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -vE "^\s+\+" /tmp/v/timeline_35b.log | tail -16
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
