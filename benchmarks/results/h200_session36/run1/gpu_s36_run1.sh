#!/usr/bin/env bash
# Session 36, run 1 (one GPU). Libraries (scripts/build_variant_lib.sh NAME FLAGS):
#   m41: main + the sorted GEMM's tile chosen per call (short up to 48 rows per expert), K loop one step ahead;
#   m42: m41 + the K loop two steps ahead (two register sets; 96 registers on sm_90, 2 blocks per SM);
#   m43: m42 built with -DREVOLTA_MOE_GEMM_MIN_BLOCKS=3 (80 registers, 3 blocks per SM, small spills).
# 1. GPU tests of the sorted GEMM (wide, short, auto; K loops of 1-10 steps) on m42 and m43.
# 2. quant_moe_sorted_bench.py --sorted-only (auto tile) on m41 / m42 / m43, twice, interleaved; then the full bench
#    (grouped against sorted) on m42, for the decode threshold SORTED_MIN_ROWS_PER_EXPERT.
# 3. Qwen3.5-35B-A3B AWQ: 128 concurrent on m41 / m42 / m43; TTFT at a 1024-token prompt, tile 0 against auto.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m41 m42 m43
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
K=packages/revolta-kernels/tests
(export $(lib m42); gpu_tests sorted_gemm_m42 150 $K/test_quant_moe_gemm_gpu.py)
(export $(lib m43); gpu_tests sorted_gemm_m43 150 $K/test_quant_moe_gemm_gpu.py)
for i in 1 2; do
  for v in m41 m42 m43; do
    env $(lib $v) timeout 60 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only --out /tmp/v/sorted_${v}_$i.json \
      > /tmp/v/sorted_${v}_$i.log 2>&1
    echo "[${SECONDS}s] sorted bench $v rc=$?"; grep -E "T= *(1|8|64|256|1024) " /tmp/v/sorted_${v}_$i.log | tr -s ' '
  done
done
env $(lib m42) timeout 90 python3 benchmarks/quant_moe_sorted_bench.py --out /tmp/v/full_m42.json > /tmp/v/full_m42.log 2>&1
echo "[${SECONDS}s] full bench m42 rc=$?"; cat /tmp/v/full_m42.log | tr -s ' '
M=benchmarks/configs/qwen3.5-35b-a3b-awq
for v in m41 m42 m43; do
  env $(lib $v) timeout 120 python3 benchmarks/gpu_e2e.py --config $M --concurrency 128 \
    --input-len 64 --output-len 192 --prefill-len 1024 --out /tmp/v/conc_$v.json > /tmp/v/conc_$v.log 2>&1
  echo "[${SECONDS}s] conc $v rc=$? $(grep -hoE '"(concurrent128_output_tok_s|prefill1024_tok_s|batch1_decode_tok_s)": [0-9.]+' /tmp/v/conc_$v.json | tr '\n' ' ')"
done
export HYBRID_PROMPT_LEN=1024
for i in 1 2; do
  hybrid_run wide_$i $M $(lib m42) REVOLTA_QUANT_MOE_GEMM_TILE=0
  hybrid_run auto_$i $M $(lib m42)
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
