#!/usr/bin/env bash
# Session 38, run 3 (one GPU, asked for an H200): issue 6's bars once more with main's kernels (library m47 = 55b6896), the chained-stream
# ceiling on the same card, where the decode step's time goes, and every quantized GPU test on this library.
# 1. Llama-3.1-8B batch 1: fp16 / AWQ / AWQ with int8 activations (gpu_e2e.py).
# 2. quant_bench.py, fp16 and int8 activations (the M=1 and M=4096 bars).
# 3. chain_ceiling.py: the fastest a dependent chain of kernels can stream each bar shape's bytes on this GPU.
# 4. decode_timeline.py: AWQ batch 1 (fp16 and int8 activations), per layer on the critical path.
# 5. GPU tests: the quantized kernels' and the engine's quantized paths.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m47
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
export $(lib m47)
e2e fp16 benchmarks/configs/llama-3.1-8b
e2e awq benchmarks/configs/llama-3.1-8b-awq
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
timeout 60 python3 benchmarks/quant_bench.py --out /tmp/v/quant_fp16.json > /tmp/v/qb_fp16.log 2>&1
echo "[${SECONDS}s] quant_bench fp16 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_fp16.log
REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,22" timeout 60 python3 benchmarks/quant_bench.py \
  --out /tmp/v/quant_int8.json > /tmp/v/qb_int8.log 2>&1
echo "[${SECONDS}s] quant_bench int8 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_int8.log
timeout 120 python3 benchmarks/chain_ceiling.py --context 1024 --out /tmp/v/ceiling.json > /tmp/v/ceiling.log 2>&1
echo "[${SECONDS}s] chain_ceiling rc=$?"; grep -vE "^\s*$" /tmp/v/ceiling.log | tail -30
for act in none int8; do
  REVOLTA_ACTIVATION_QUANT=$act timeout 100 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
    --prompt-len 1024 --reps 3 --out /tmp/v/timeline_awq_$act.json > /tmp/v/timeline_awq_$act.log 2>&1
  echo "[${SECONDS}s] timeline $act rc=$?"; grep -vE "^\s+\+" /tmp/v/timeline_awq_$act.log | tail -14
done
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
gpu_tests quant_kernels 220 $K/test_quant_gpu.py $K/test_quant_norm_gpu.py $K/test_quant_xq_gpu.py \
  $K/test_quant_order_gpu.py $K/test_quant_rope_gpu.py $K/test_quant_moe_gemm_gpu.py
gpu_tests quant_engine 100 $E/test_gpu_fused_norm.py $E/test_gpu_qkv_rope.py $E/test_gpu_quant_hybrid.py \
  $E/test_linear_quant_norm.py
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
