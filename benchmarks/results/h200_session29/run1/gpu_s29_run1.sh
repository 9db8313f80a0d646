#!/usr/bin/env bash
# Session 29, run 1 (one GPU): the lean batch-1 decode attention kernel (REVOLTA_DECODE_LEAN=1, session 27) checked
# and measured against the light kernel, issue 6's end-to-end figures in the same run, and session 28's quantized
# MoE experts on the GPU. Library m29: main's kernels (this tree) for sm_90, carried in .devcarry.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m29
export REVOLTA_NATIVE_LIB=/tmp/libs/m29/librevolta_native.so
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
gpu_tests attention 240 packages/revolta-kernels/tests/test_attention_gpu.py packages/revolta-kernels/tests/test_rope_attention_gpu.py
REVOLTA_DECODE_LEAN=1 gpu_tests engine_lean 200 packages/revolta-engine/tests/test_gpu_engine.py \
  packages/revolta-engine/tests/test_gpu_qkv_rope.py
gpu_tests quant_hybrid 200 packages/revolta-engine/tests/test_gpu_quant_hybrid.py
e2e fp16 benchmarks/configs/llama-3.1-8b
for r in 1 2; do
  e2e "awq_$r" benchmarks/configs/llama-3.1-8b-awq
  e2e "awq_lean_$r" benchmarks/configs/llama-3.1-8b-awq REVOLTA_DECODE_LEAN=1
  e2e "int8_$r" benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
  e2e "int8_lean_$r" benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8 REVOLTA_DECODE_LEAN=1
done
for lean in 0 1; do
  env REVOLTA_ACTIVATION_QUANT=int8 REVOLTA_DECODE_LEAN=$lean timeout 90 python3 benchmarks/decode_timeline.py \
    --prompt-len 1024 --out /tmp/v/timeline_lean$lean.json >/tmp/v/timeline_lean$lean.log 2>&1
  echo "[${SECONDS}s] timeline lean=$lean rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_lean$lean.log | head -9
done
for lean in 0 1; do
  env REVOLTA_DECODE_LEAN=$lean timeout 90 python3 benchmarks/kernels_bench.py --engine-only --no-split-sweep \
    --out /tmp/v/kb_lean$lean.json >/tmp/v/kb_lean$lean.log 2>&1
  echo "[${SECONDS}s] kernels_bench lean=$lean rc=$?"; grep -E "b1 |b8 " /tmp/v/kb_lean$lean.log | head -8
done
timeout 150 python3 benchmarks/hybrid_e2e.py --config benchmarks/configs/qwen3.5-35b-a3b-awq \
  --out /tmp/v/hybrid_35b_awq.json >/tmp/v/hybrid_35b_awq.log 2>&1
echo "[${SECONDS}s] hybrid 35B-A3B AWQ rc=$?"; tail -5 /tmp/v/hybrid_35b_awq.log
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
