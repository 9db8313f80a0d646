#!/usr/bin/env bash
# Session 35, run 4 (one GPU): library m39 = m38 + the sorted-rows MoE GEMM's deep tile (64 columns, K steps of 64;
# default where K % 64 == 0) beside the wide one (128 columns, K steps of 32; REVOLTA_QUANT_MOE_GEMM_TILE=0).
# 1. GPU tests: the sorted GEMM on both tiles; the engine's quantized hybrid tests (default tile).
# 2. quant_moe_sorted_bench.py, sorted path only, wide / deep / wide / deep.
# 3. Qwen3.5-35B-A3B AWQ time to first token (1024-token prompt), wide / deep interleaved, and 128 concurrent.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m39
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m39/librevolta_native.so
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
gpu_tests sorted_gemm 120 $K/test_quant_moe_gemm_gpu.py
gpu_tests engine_quant_hybrid 150 $E/test_gpu_quant_hybrid.py
for i in 1 2; do
  for t in 0 1; do
    timeout 60 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only --tile $t --out /tmp/v/sorted_t${t}_$i.json \
      > /tmp/v/sorted_t${t}_$i.log 2>&1
    echo "[${SECONDS}s] sorted bench tile $t rc=$?"; grep -E "T= *(64|256|1024)" /tmp/v/sorted_t${t}_$i.log
  done
done
export HYBRID_PROMPT_LEN=1024
M=benchmarks/configs/qwen3.5-35b-a3b-awq
for i in 1 2; do
  hybrid_run wide_$i $M REVOLTA_QUANT_MOE_GEMM_TILE=0
  hybrid_run deep_$i $M REVOLTA_QUANT_MOE_GEMM_TILE=1
done
timeout 150 python3 benchmarks/gpu_e2e.py --config $M --concurrency 128 --input-len 64 --output-len 192 \
  --prefill-len 1024 --out /tmp/v/conc_deep.json > /tmp/v/conc_deep.log 2>&1
echo "[${SECONDS}s] conc deep rc=$? $(grep -hoE '"(batch1_decode_tok_s|concurrent128_output_tok_s|prefill1024_tok_s)": [0-9.]+' /tmp/v/conc_deep.json | tr '\n' ' ')"
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
