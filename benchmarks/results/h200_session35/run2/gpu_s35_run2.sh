#!/usr/bin/env bash
# Session 35, run 2 (one GPU): library m38 = main with the routing's rank count over candidates only
# (moe_route_block_cand, shared by moe_topk_softmax_kernel, the router kernel's routing tail and v3's up kernel);
# m37 = the library of run 1 (every routing thread scanning all E logits). Defaults now: fused down + weighted sum
# on, sorted prefill GEMM on, routing in the router kernel off (run 1: 8% slower with the full scan).
# 1. GPU tests: routing, router + norm (+ top-k), the MoE kernels whose routing moved; the engine's hybrid and
#    quantized hybrid tests with the defaults and with REVOLTA_MOE_ROUTER_TOPK=1.
# 2. Qwen3.5-35B-A3B AWQ batch 1 (1024-token prompt), interleaved x2: m37 (old routing) / m38 / m38 + topk in router.
# 3. The sorted GEMM against the grouped decode kernels from 1 to 1024 tokens (quant_moe_sorted_bench.py).
# 4. The on-path timeline with the defaults.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m37 m38
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m38/librevolta_native.so
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
gpu_tests routing 150 $K/test_moe_router_topk_gpu.py $K/test_moe_routing_gpu.py $K/test_moe_gpu.py
gpu_tests engine_hybrid 150 $E/test_gpu_hybrid.py $E/test_gpu_quant_hybrid.py
(export REVOLTA_MOE_ROUTER_TOPK=1; gpu_tests engine_topk 120 $E/test_gpu_quant_hybrid.py)
export HYBRID_PROMPT_LEN=1024
M=benchmarks/configs/qwen3.5-35b-a3b-awq
OLD=REVOLTA_NATIVE_LIB=/tmp/libs/m37/librevolta_native.so
for i in 1 2; do
  hybrid_run old_$i $M $OLD
  hybrid_run base_$i $M REVOLTA_MOE_ROUTER_TOPK=0
  hybrid_run topk_$i $M REVOLTA_MOE_ROUTER_TOPK=1
done
timeout 150 python3 benchmarks/quant_moe_sorted_bench.py --out /tmp/v/sorted_bench.json > /tmp/v/sorted_bench.log 2>&1
echo "[${SECONDS}s] sorted bench rc=$?"; cat /tmp/v/sorted_bench.log | tail -25
timeout 120 python3 benchmarks/decode_timeline.py --config $M --prompt-len 1024 --reps 3 --out /tmp/v/timeline_35b.json \
  > /tmp/v/timeline_35b.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -vE "^\s+\+" /tmp/v/timeline_35b.log | tail -14
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
