#!/usr/bin/env bash
# (The hand-off code was reverted after this run and is not on main: REVOLTA_L2_HANDOFF_KB does nothing there.)
# Eleventh session, run 2 (H200): the L2 hand-off (QuantGemmParams::ho_*, engine/l2_handoff.py): each quantized
# decode projection's kernel prefetches into L2, as its warps finish their weights, the rows that the next
# projection's kernel reads first (o -> gate_up, gate_up -> down, down -> the next layer's q/k/v), up to
# REVOLTA_L2_HANDOFF_KB. Llama-3.1-8B AWQ batch 1 interleaved over budgets (0 = off), the quantized GPU tests and
# the engine GPU tests with it on, and the decode timeline at one budget. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
REVOLTA_L2_HANDOFF_KB=4096 gpu_tests tests_handoff 200 packages/revolta-kernels/tests/test_quant_gpu.py \
  packages/revolta-kernels/tests/test_quant_norm_gpu.py packages/revolta-engine/tests/test_gpu_qkv_rope.py \
  packages/revolta-engine/tests/test_linear_quant_norm.py
for round in 1 2; do
  for kb in 0 2048 4096 8192 16384; do
    REVOLTA_L2_HANDOFF_KB=$kb awq_e2e "ho${kb}_$round" ""
  done
done
REVOLTA_L2_HANDOFF_KB=${TIMELINE_KB:-4096} timeout 80 python3 benchmarks/decode_timeline.py \
  --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline_awq_handoff.json >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] AWQ decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_awq.log | head -8
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
