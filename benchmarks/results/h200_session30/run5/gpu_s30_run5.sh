#!/usr/bin/env bash
# Session 30, run 5 (one GPU): Qwen3.5-35B-A3B AWQ batch-1 decode with the split-K-free skinny kernel forced for every
# legal projection (REVOLTA_QUANT_TUNE gemv_full = 1: also the Gated DeltaNet in_proj, N = 12288, and the attention
# q/k/v, N = 9216, which the built-in rule (N <= 8192) gives to the split-K kernel), against the default, two
# interleaved rounds. Library m30s (this tree's kernels).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m30s
export REVOLTA_NATIVE_LIB=/tmp/libs/m30s/librevolta_native.so
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
hybrid() {  # hybrid LABEL TUNE
  REVOLTA_QUANT_TUNE="$2" timeout 80 python3 benchmarks/hybrid_e2e.py \
    --config benchmarks/configs/qwen3.5-35b-a3b-awq --out /tmp/v/hybrid_$1.json >/tmp/v/hybrid_$1.log 2>&1
  echo "[${SECONDS}s] hybrid 35B-A3B AWQ $1 rc=$? $(grep -hoE '"batch1_decode_tok_s": [0-9.]+' /tmp/v/hybrid_$1.json)"
}
for round in 1 2; do
  hybrid default$round ""
  hybrid full$round "0,0,1,-1,-1,-1,0,0,1,-1"
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
