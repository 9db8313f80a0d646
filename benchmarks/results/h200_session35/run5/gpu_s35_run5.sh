#!/usr/bin/env bash
# Session 35, run 5 (one GPU; written in session 35, not run: its device time was spent). Library m40 = main: the
# sorted-rows MoE GEMM's short tile (32 rows x 128 columns, K steps of 64; opt-in REVOLTA_QUANT_MOE_GEMM_TILE=1)
# beside the wide one (64 x 128 x 32, the default). Build it first: scripts/build_variant_lib.sh m40 ""
# 1. GPU tests: the sorted GEMM on both tiles; the engine's quantized hybrid tests with the short tile.
# 2. quant_moe_sorted_bench.py, sorted path only, wide / short / wide / short.
# 3. Qwen3.5-35B-A3B AWQ: time to first token (1024-token prompt) wide / short interleaved, and 128 concurrent with
#    each. If short wins: make it the default (quant_gemm.cu quant_moe_gemm_tile(), the NOTES, README).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m40
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m40/librevolta_native.so
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
gpu_tests sorted_gemm 120 $K/test_quant_moe_gemm_gpu.py
(export REVOLTA_QUANT_MOE_GEMM_TILE=1; gpu_tests engine_quant_hybrid 150 $E/test_gpu_quant_hybrid.py)
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
  hybrid_run short_$i $M REVOLTA_QUANT_MOE_GEMM_TILE=1
done
for t in 0 1; do
  REVOLTA_QUANT_MOE_GEMM_TILE=$t timeout 150 python3 benchmarks/gpu_e2e.py --config $M --concurrency 128 \
    --input-len 64 --output-len 192 --prefill-len 1024 --out /tmp/v/conc_t$t.json > /tmp/v/conc_t$t.log 2>&1
  echo "[${SECONDS}s] conc tile $t rc=$? $(grep -hoE '"(concurrent128_output_tok_s|prefill1024_tok_s)": [0-9.]+' /tmp/v/conc_t$t.json | tr '\n' ' ')"
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
