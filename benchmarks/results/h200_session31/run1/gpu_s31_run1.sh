#!/usr/bin/env bash
# Session 31, run 1 (one GPU): the lean one-or-two-token quantized MoE kernel (csrc/quant_moe_lean.cuh) and PDL
# launches for quant_moe_gemv / moe_topk_softmax / moe_combine. Library m31a = this tree. GPU tests (quantized MoE
# both kernels, routing/combine, the engine's quantized hybrid tests), quant_moe_bench with the original kernel forced
# in the same process (--ab), Qwen3.5-35B-A3B AWQ batch 1: default, the original kernel (LEAN_TOKENS=0), and without
# the hybrid kernels' PDL; the default's timeline.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m31a
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m31a/librevolta_native.so
gpu_tests quant_moe 150 packages/revolta-kernels/tests/test_quant_moe_gpu.py
gpu_tests routing 60 packages/revolta-kernels/tests/test_moe_routing_gpu.py
timeout 100 python3 benchmarks/quant_moe_bench.py --ab --out /tmp/v/quant_moe_bench.json >/tmp/v/quant_moe_bench.log 2>&1
echo "[${SECONDS}s] quant_moe_bench rc=$?"; grep -E "T=" /tmp/v/quant_moe_bench.log
CFG=benchmarks/configs/qwen3.5-35b-a3b-awq
hybrid_run lean "$CFG"
hybrid_run orig "$CFG" REVOLTA_QUANT_MOE_LEAN_TOKENS=0
hybrid_run nopdl "$CFG" REVOLTA_HYBRID_PDL=0
hybrid_run lean2 "$CFG"
gpu_tests engine_quant_hybrid 150 packages/revolta-engine/tests/test_gpu_quant_hybrid.py
timeout 80 python3 benchmarks/decode_timeline.py --config "$CFG" --prompt-len 1024 \
  --out /tmp/v/timeline_awq.json >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -v Warning /tmp/v/timeline_awq.log | grep -v "^    +" | tail -14
grep "^    +" /tmp/v/timeline_awq.log | head -14
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
