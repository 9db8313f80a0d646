#!/usr/bin/env bash
# Tenth session, run 1 (H200): the q/k/v projection with rotary + KV-cache write in its epilogue
# (revolta::quant_qkv_rope_cache, csrc/quant_gemv_rope.cuh). Its GPU tests (kernel and engine), the quantized and
# rotary/attention tests around it, then Llama-3.1-8B AWQ batch 1 with it on (default) and off
# (REVOLTA_FUSED_QKV_ROPE=0), interleaved. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
gpu_tests rope_tests 150 packages/revolta-kernels/tests/test_quant_rope_gpu.py packages/revolta-engine/tests/test_gpu_qkv_rope.py \
  packages/revolta-kernels/tests/test_rope_attention_gpu.py
for round in 1 2; do
  awq_e2e "fused_$round" ""
  REVOLTA_FUSED_QKV_ROPE=0 awq_e2e "unfused_$round" ""
done
quant_tests 150
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
