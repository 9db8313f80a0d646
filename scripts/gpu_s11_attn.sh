#!/usr/bin/env bash
# (The two attention changes were reverted after this run: on main this script runs main against itself.)
# Eleventh session, run 1 (H200): the decode attention's two latency cuts (decode_light.cuh: the newest key's cache
# offset read from the block table before the PDL wait; attention.cuh: merge_splits loads up to 8 splits' partials
# before using any, one L2 round trip where batches of 4 took two at 5-8 splits) in the default library
# ($REVOLTA_NATIVE_LIB) against main's library before them (librevolta_base.so). GPU tests of the attention paths
# and the engine first, then Llama-3.1-8B AWQ batch 1 interleaved, the 32-column output projection (schedule flags 2
# alone) on the new library, the decode timeline, and the quantized GEMM/GEMV benchmarks again after session 10's
# split-K arrival change. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
gpu_tests tests_attn 240 packages/revolta-kernels/tests/test_attention_gpu.py packages/revolta-kernels/tests/test_rope_attention_gpu.py \
  packages/revolta-kernels/tests/test_quant_rope_gpu.py packages/revolta-kernels/tests/test_hybrid_gpu.py \
  packages/revolta-engine/tests/test_gpu_qkv_rope.py packages/revolta-engine/tests/test_gpu_engine.py
O32="0,0,1,-1,-1,-1,0,0,-1,2"
for round in 1 2 3; do
  awq_e2e "new_$round" ""
  REVOLTA_NATIVE_LIB=$ROOT/librevolta_base.so awq_e2e "base_$round" ""
done
awq_e2e "o32_1" "$O32"
awq_e2e "o32_2" "$O32"
timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline_awq.json \
  >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] AWQ decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_awq.log | head -8
timeout 90 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >/tmp/v/quant_bench.log 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; grep -vE "^\s*$" /tmp/v/quant_bench.log | tail -16
timeout 70 python3 benchmarks/gemv_bench.py --sections awq --out /tmp/v/gemv_bench.json >/tmp/v/gemv_bench.log 2>&1
echo "[${SECONDS}s] gemv_bench rc=$?"; grep -vE "^\s*$" /tmp/v/gemv_bench.log | tail -12
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
