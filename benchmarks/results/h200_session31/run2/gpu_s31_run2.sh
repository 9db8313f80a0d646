#!/usr/bin/env bash
# Session 31, run 2 (one GPU): library m31d = this tree: the lean quantized MoE kernel at one token only, with 32, 64
# or 128 columns per block by K (a down projection of K = 512 no longer two waves), the routing inside its blocks
# (revolta::quant_moe_route_matmul: no routing launch at batch 1), and moe_combine over 512-column blocks with every
# row's loads issued first. GPU tests (quantized MoE with the route op, routing/combine with top_k 1-17, the engine's
# quantized hybrid tests), quant_moe_bench with the original kernel forced (--ab), Qwen3.5-35B-A3B AWQ batch 1:
# default, the routing as its own op (REVOLTA_QUANT_MOE_ROUTE=0) and the original kernel (LEAN_TOKENS=0), the
# default's timeline, and Llama-3.1-8B AWQ (int8 activations; its kernels only moved between headers) against fp16.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m31d
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m31d/librevolta_native.so
gpu_tests routing 90 packages/revolta-kernels/tests/test_moe_routing_gpu.py
gpu_tests quant_moe 150 packages/revolta-kernels/tests/test_quant_moe_gpu.py
timeout 80 python3 benchmarks/quant_moe_bench.py --ab --out /tmp/v/quant_moe_bench.json >/tmp/v/quant_moe_bench.log 2>&1
echo "[${SECONDS}s] quant_moe_bench rc=$?"; grep -E "T=  1" /tmp/v/quant_moe_bench.log
CFG=benchmarks/configs/qwen3.5-35b-a3b-awq
hybrid_run route1 "$CFG"
hybrid_run noroute "$CFG" REVOLTA_QUANT_MOE_ROUTE=0
hybrid_run orig "$CFG" REVOLTA_QUANT_MOE_LEAN_TOKENS=0
hybrid_run route2 "$CFG"
gpu_tests engine_quant_hybrid 150 packages/revolta-engine/tests/test_gpu_quant_hybrid.py
timeout 80 python3 benchmarks/decode_timeline.py --config "$CFG" --prompt-len 1024 \
  --out /tmp/v/timeline_awq.json >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -v Warning /tmp/v/timeline_awq.log | grep -v "^    +" | tail -13
grep "^    +" /tmp/v/timeline_awq.log | head -12
e2e fp16 benchmarks/configs/llama-3.1-8b
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
