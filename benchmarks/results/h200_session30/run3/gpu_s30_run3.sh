#!/usr/bin/env bash
# Session 30, run 3 (one GPU): routing and combination of the quantized MoE decode step as our kernels
# (csrc/moe_routing.cuh: revolta::moe_topk_softmax, revolta::moe_combine; the router's residual add + norm fused as
# for dense experts), library m30r = this tree. Their GPU tests, the dense MoE kernels' tests (moe_route_block
# gained a parameter), the engine's quantized hybrid tests, Qwen3.5-35B-A3B AWQ batch-1 decode and its timeline,
# and the same decode with m29q (session 29's library: torch routing) as the baseline on this card.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m29q m30r
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m30r/librevolta_native.so
gpu_tests routing 60 packages/revolta-kernels/tests/test_moe_routing_gpu.py
gpu_tests engine_quant_hybrid 150 packages/revolta-engine/tests/test_gpu_quant_hybrid.py
gpu_tests moe 90 packages/revolta-kernels/tests/test_moe_gpu.py
hybrid() {  # hybrid LABEL LIB
  REVOLTA_NATIVE_LIB=/tmp/libs/$2/librevolta_native.so timeout 100 python3 benchmarks/hybrid_e2e.py \
    --config benchmarks/configs/qwen3.5-35b-a3b-awq --out /tmp/v/hybrid_$1.json >/tmp/v/hybrid_$1.log 2>&1
  echo "[${SECONDS}s] hybrid 35B-A3B AWQ $1 rc=$?"; grep -E "batch1_decode_tok_s|batch1_fraction|cuda_graphs|\"gpu\"" \
    /tmp/v/hybrid_$1.json || grep -v Warning /tmp/v/hybrid_$1.log | tail -8
}
hybrid new m30r
timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/qwen3.5-35b-a3b-awq --prompt-len 1024 \
  --out /tmp/v/timeline_awq.json >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -v Warning /tmp/v/timeline_awq.log | grep -v "^    +" | tail -15
hybrid base m29q
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
