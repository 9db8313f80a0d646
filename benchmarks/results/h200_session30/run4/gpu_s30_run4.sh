#!/usr/bin/env bash
# Session 30, run 4 (one GPU): the shared expert stacked with the quantized experts (one more row per token in the
# grouped kernels: quant_moe_matmul's shared_id; moe_combine with strided rows), library m30s = this tree, against
# m30r (run 3's library: the shared expert as its own two GEMVs). GPU tests (quantized MoE kernel with the shared
# row, routing/combine with the fixed tie check, the engine's quantized hybrid tests), Qwen3.5-35B-A3B AWQ batch-1
# decode with each library, and m30s's timeline.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m30r m30s
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m30s/librevolta_native.so
gpu_tests quant_moe 120 packages/revolta-kernels/tests/test_quant_moe_gpu.py
gpu_tests routing 60 packages/revolta-kernels/tests/test_moe_routing_gpu.py
gpu_tests engine_quant_hybrid 150 packages/revolta-engine/tests/test_gpu_quant_hybrid.py
hybrid() {  # hybrid LABEL LIB
  REVOLTA_NATIVE_LIB=/tmp/libs/$2/librevolta_native.so timeout 100 python3 benchmarks/hybrid_e2e.py \
    --config benchmarks/configs/qwen3.5-35b-a3b-awq --out /tmp/v/hybrid_$1.json >/tmp/v/hybrid_$1.log 2>&1
  echo "[${SECONDS}s] hybrid 35B-A3B AWQ $1 rc=$?"; grep -E "batch1_decode_tok_s|batch1_fraction|cuda_graphs|\"gpu\"" \
    /tmp/v/hybrid_$1.json || grep -v Warning /tmp/v/hybrid_$1.log | tail -8
}
hybrid new m30s
hybrid base m30r
timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/qwen3.5-35b-a3b-awq --prompt-len 1024 \
  --out /tmp/v/timeline_awq.json >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -v Warning /tmp/v/timeline_awq.log | grep -v "^    +" | tail -12
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
