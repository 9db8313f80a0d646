#!/usr/bin/env bash
# Session 17: quantized Qwen3.5 (hybrid) on the H200: its GPU tests, the engine's GPU tests after the MLP/GDN
# refactor, the dense Qwen3.5-27B shape fp16 and AWQ batch-1 decode, and the Llama-8B AWQ batch-1 check.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
gpu_tests quant_hybrid_gpu_tests 300 packages/revolta-engine/tests/test_gpu_quant_hybrid.py
gpu_tests engine_gpu_tests 420 packages/revolta-engine/tests
for cfg in qwen3.5-27b qwen3.5-27b-awq; do
  timeout 240 python3 benchmarks/hybrid_e2e.py --config benchmarks/configs/$cfg --out "$OUT/e2e_$cfg.json" \
    >"$OUT/e2e_$cfg.log" 2>&1
  echo "[${SECONDS}s] $cfg rc=$? $(grep -hoE '"(batch1_decode_tok_s|batch1_fraction_of_roofline|roofline_tok_s|graph_forward_ms|lm_head_ms|eager_batch1_decode_tok_s)": [0-9.]+' "$OUT/e2e_$cfg.json" | tr '\n' ' ')"
  tail -3 "$OUT/e2e_$cfg.log"
done
timeout 150 python3 benchmarks/decode_timeline.py --config benchmarks/configs/qwen3.5-27b-awq \
  --out "$OUT/timeline_27b_awq.json" >"$OUT/timeline_27b_awq.log" 2>&1
echo "[${SECONDS}s] timeline 27b awq rc=$?"; tail -12 "$OUT/timeline_27b_awq.log"
awq_e2e default ""
cp /tmp/v/awq_default.json "$OUT/" 2>/dev/null
echo "[${SECONDS}s] done"
