#!/usr/bin/env bash
# Session 35, run 1 (= session 34 run 1 script, first run) (one GPU): library m37 = main = session 33's fused quantized MoE down projection + weighted sum
# (opt-in REVOLTA_QUANT_MOE_FUSED_COMBINE=1) + this session's routing inside the router kernel (moe_router_norm_topk,
# opt-in REVOLTA_MOE_ROUTER_TOPK=1) + the quantized MoE prefill GEMM over rows sorted by expert (quant_moe_gemm,
# opt-in REVOLTA_QUANT_MOE_SORTED_GEMM=1). None of the three kernels has run on a GPU before this.
# 1. GPU tests: the kernels against the reference and the launches they replace; the router/MoE kernels they touch;
#    the engine's hybrid and quantized hybrid tests with all three on.
# 2. Qwen3.5-35B-A3B AWQ batch 1 (1024-token prompt): neither / both / both + the sorted prefill GEMM (time to first
#    token against the per-expert loop of the others) / neither / both; after the bars, combine alone / topk alone.
# 3. Issue 6's bars (defaults: both fusions off, they touch only MoE models): Llama-3.1-8B fp16 / AWQ / AWQ with int8
#    activations at batch 1, quant_bench with fp16 and int8 activations.
# 4. The on-path timeline with both on.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m37
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m37/librevolta_native.so
K=packages/revolta-kernels/tests
gpu_tests combine 120 $K/test_quant_moe_combine_gpu.py
gpu_tests router_topk 120 $K/test_moe_router_topk_gpu.py $K/test_moe_gpu.py -k router
gpu_tests sorted_gemm 120 $K/test_quant_moe_gemm_gpu.py
ON="REVOLTA_QUANT_MOE_FUSED_COMBINE=1 REVOLTA_MOE_ROUTER_TOPK=1 REVOLTA_QUANT_MOE_SORTED_GEMM=1"
(export $ON; gpu_tests engine_hybrid 150 packages/revolta-engine/tests/test_gpu_hybrid.py \
  packages/revolta-engine/tests/test_gpu_quant_hybrid.py)
export HYBRID_PROMPT_LEN=1024
M=benchmarks/configs/qwen3.5-35b-a3b-awq
hybrid_run neither_1 $M REVOLTA_QUANT_MOE_FUSED_COMBINE=0 REVOLTA_MOE_ROUTER_TOPK=0
hybrid_run both_1 $M REVOLTA_QUANT_MOE_FUSED_COMBINE=1 REVOLTA_MOE_ROUTER_TOPK=1
hybrid_run sorted $M $ON
hybrid_run neither_2 $M REVOLTA_QUANT_MOE_FUSED_COMBINE=0 REVOLTA_MOE_ROUTER_TOPK=0
hybrid_run both_2 $M REVOLTA_QUANT_MOE_FUSED_COMBINE=1 REVOLTA_MOE_ROUTER_TOPK=1
e2e fp16 benchmarks/configs/llama-3.1-8b
e2e awq benchmarks/configs/llama-3.1-8b-awq
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
timeout 60 python3 benchmarks/quant_bench.py --out /tmp/v/quant_fp16.json > /tmp/v/qb_fp16.log 2>&1
echo "[${SECONDS}s] quant_bench fp16 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_fp16.log
REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,22" timeout 60 python3 benchmarks/quant_bench.py \
  --out /tmp/v/quant_int8.json > /tmp/v/qb_int8.log 2>&1
echo "[${SECONDS}s] quant_bench int8 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_int8.log
hybrid_run combine_1 $M REVOLTA_QUANT_MOE_FUSED_COMBINE=1 REVOLTA_MOE_ROUTER_TOPK=0
hybrid_run topk_1 $M REVOLTA_QUANT_MOE_FUSED_COMBINE=0 REVOLTA_MOE_ROUTER_TOPK=1
REVOLTA_QUANT_MOE_FUSED_COMBINE=1 REVOLTA_MOE_ROUTER_TOPK=1 timeout 120 python3 benchmarks/decode_timeline.py \
  --config $M --prompt-len 1024 --reps 3 --out /tmp/v/timeline_35b.json > /tmp/v/timeline_35b.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -vE "^\s+\+" /tmp/v/timeline_35b.log | tail -16
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
