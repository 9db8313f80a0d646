#!/usr/bin/env bash
# Tenth session, run 5 (H200): split-K arrivals as one acquire-release atomic (split_arrive.cuh: the skinny GEMV's
# and the decode attention's in-kernel merges) in the default library ($REVOLTA_NATIVE_LIB) against run 4's library
# (librevolta_r4.so: __threadfence on either side of the atomic), and the split-K-free kernel's norm weight staged
# in shared memory before the PDL wait (schedule flag 16 on top of the default 2 | 4). GPU tests of the changed
# paths first (the flag's under REVOLTA_QUANT_TUNE), then Llama-3.1-8B AWQ batch 1 interleaved.
# (Flag 16 was removed after this run; the flag value 22 now means the default 2 | 4.)
# Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
NORM_EARLY="0,0,1,-1,-1,-1,0,0,-1,22"
gpu_tests tests_arrive 200 packages/revolta-kernels/tests/test_quant_gpu.py packages/revolta-kernels/tests/test_attention_gpu.py \
  packages/revolta-kernels/tests/test_quant_rope_gpu.py packages/revolta-engine/tests/test_gpu_qkv_rope.py
REVOLTA_QUANT_TUNE=$NORM_EARLY gpu_tests tests_norm_early 120 packages/revolta-kernels/tests/test_quant_norm_gpu.py \
  packages/revolta-kernels/tests/test_quant_rope_gpu.py packages/revolta-engine/tests/test_linear_quant_norm.py
for round in 1 2; do
  awq_e2e "arrive_$round" ""
  REVOLTA_NATIVE_LIB=$ROOT/librevolta_r4.so awq_e2e "r4_$round" ""
  awq_e2e "normearly_$round" "$NORM_EARLY"
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
