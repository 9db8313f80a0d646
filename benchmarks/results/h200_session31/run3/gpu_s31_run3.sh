#!/usr/bin/env bash
# Session 31, run 3 (one GPU): library m31e = main's kernels after the in-kernel routing was removed (the lean
# one-token MoE kernel with the routing kernel before it, PDL launches, the wider moe_combine). GPU tests: quantized
# MoE, routing/combine, the dense quantized GEMV/GEMM (their headers changed), the engine's quantized hybrid and GPU
# engine tests; Qwen3.5-35B-A3B AWQ batch 1, lean against the original kernel in two interleaved rounds; timeline.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m31e
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m31e/librevolta_native.so
gpu_tests quant_moe 120 packages/revolta-kernels/tests/test_quant_moe_gpu.py
gpu_tests routing 60 packages/revolta-kernels/tests/test_moe_routing_gpu.py
gpu_tests quant 200 packages/revolta-kernels/tests/test_quant_gpu.py
CFG=benchmarks/configs/qwen3.5-35b-a3b-awq
for r in 1 2; do
  hybrid_run "lean$r" "$CFG"
  hybrid_run "orig$r" "$CFG" REVOLTA_QUANT_MOE_LEAN_TOKENS=0
done
gpu_tests engine 200 packages/revolta-engine/tests/test_gpu_quant_hybrid.py packages/revolta-engine/tests/test_gpu_engine.py
timeout 80 python3 benchmarks/decode_timeline.py --config "$CFG" --prompt-len 1024 \
  --out /tmp/v/timeline_awq.json >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -v Warning /tmp/v/timeline_awq.log | grep -v "^    +" | tail -13
grep "^    +" /tmp/v/timeline_awq.log | head -12
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
