#!/usr/bin/env bash
# Tenth session, run 3 (H200): the fused q/k/v rotary epilogue with its cos/sin and slot loads issued after the PDL
# wait and left in flight (the default library, $REVOLTA_NATIVE_LIB) against run 2's library (librevolta_r2.so:
# cos/sin staged in shared memory before the wait, which stalls warp 0 on two dependent loads), both with the
# wide light attention; its GPU tests (quantized, fused rotary, attention, engine), the decode timeline.
# Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
gpu_tests tests_attn 200 packages/revolta-kernels/tests/test_quant_rope_gpu.py packages/revolta-engine/tests/test_gpu_qkv_rope.py \
  packages/revolta-kernels/tests/test_attention_gpu.py packages/revolta-kernels/tests/test_rope_attention_gpu.py \
  packages/revolta-engine/tests/test_gpu_engine.py
for round in 1 2; do
  awq_e2e "issue_$round" ""
  REVOLTA_DECODE_LIGHT_WIDE=1 REVOLTA_NATIVE_LIB=$ROOT/librevolta_r2.so awq_e2e "r2smem_$round" ""
done
timeout 90 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline.json \
  >/tmp/v/timeline.log 2>&1; echo "[${SECONDS}s] timeline rc=$?"; head -8 /tmp/v/timeline.log | grep -v WARN
quant_tests 150
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
