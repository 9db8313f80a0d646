#!/usr/bin/env bash
# Session 35, run 3 (one GPU): library m38 (as run 2). Engine change: decode steps with >= 4 routed rows per expert
# take the sorted-rows GEMM (quant_moe.SORTED_MIN_ROWS_PER_EXPERT, REVOLTA_QUANT_MOE_SORTED_MIN_ROWS), captured in
# CUDA graphs like the grouped path.
# 1. The engine's quantized hybrid GPU tests (new case: the sorted path inside the captured graphs) and hybrid tests.
# 2. Qwen3.5-35B-A3B AWQ, 128 concurrent requests (64-token prompts, 192 output tokens): threshold 4 (default) vs
#    never (1e9), interleaved; batch-1 decode and a 1024-token prefill come with each run.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m38
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m38/librevolta_native.so
E=packages/revolta-engine/tests
gpu_tests engine_quant_hybrid 200 $E/test_gpu_quant_hybrid.py $E/test_gpu_hybrid.py
M=benchmarks/configs/qwen3.5-35b-a3b-awq
conc() {
  env "$2" timeout 150 python3 benchmarks/gpu_e2e.py --config $M --concurrency 128 --input-len 64 --output-len 192 \
    --prefill-len 1024 --out "/tmp/v/conc_$1.json" > "/tmp/v/conc_$1.log" 2>&1
  echo "[${SECONDS}s] $1 rc=$? $(grep -hoE '"(batch1_decode_tok_s|concurrent128_output_tok_s|prefill1024_tok_s)": [0-9.]+' "/tmp/v/conc_$1.json" | tr '\n' ' ')"
}
conc sorted_1 REVOLTA_QUANT_MOE_SORTED_MIN_ROWS=4
conc grouped_1 REVOLTA_QUANT_MOE_SORTED_MIN_ROWS=1e9
conc sorted_2 REVOLTA_QUANT_MOE_SORTED_MIN_ROWS=4
conc grouped_2 REVOLTA_QUANT_MOE_SORTED_MIN_ROWS=1e9
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
