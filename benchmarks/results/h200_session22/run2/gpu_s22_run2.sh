#!/usr/bin/env bash
# Session 22, run 2 (H200): int8 activations (tune flag 16) now also in the split-K-free kernel (q/k/v with the rotary
# epilogue, o). wy = this library. Tests of both activation paths, the M=1 chains with flags 6 / 22, quant_bench's
# bars with the flag (and with the split-K kernel forced, for 4096x4096), AWQ batch 1 with and without the flag
# against fp16 in the same run, a decode timeline with the flag, and the engine GPU tests.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs wy
export REVOLTA_NATIVE_LIB=/tmp/libs/wy/librevolta_native.so
XQ="0,0,1,-1,-1,-1,0,0,-1,22"
T=packages/revolta-kernels/tests
gpu_tests quant 300 $T/test_quant_xq_gpu.py $T/test_quant_rope_gpu.py $T/test_quant_gpu.py $T/test_quant_norm_gpu.py \
  $T/test_quant_order_gpu.py
timeout 120 python3 benchmarks/gemv_flags_ab.py --flags 6,22 --out /tmp/v/ab.json \
  --chains llama8b_32_layers,4096x4096,4096x6144_norm,4096x14336 > /tmp/v/ab.log 2>&1
echo "[${SECONDS}s] flags A/B rc=$?"; cat /tmp/v/ab.log
for t in xq xq_splitk; do
  tune=$XQ; [ $t = xq_splitk ] && tune="0,0,1,-1,-1,-1,0,0,0,22"
  REVOLTA_QUANT_TUNE="$tune" timeout 90 python3 benchmarks/quant_bench.py --out /tmp/v/qb_$t.json > /tmp/v/qb_$t.log 2>&1
  echo "[${SECONDS}s] quant_bench $t rc=$?"; grep -E "copy|M=1" /tmp/v/qb_$t.log
done
AWQ=benchmarks/configs/llama-3.1-8b-awq
for i in 1 2; do
  e2e "awq_$i" $AWQ
  e2e "awq_xq_$i" $AWQ REVOLTA_QUANT_TUNE=$XQ
  e2e "fp16_$i" benchmarks/configs/llama-3.1-8b
done
REVOLTA_QUANT_TUNE=$XQ timeout 60 python3 benchmarks/decode_timeline.py --config $AWQ --reps 3 \
  --out /tmp/v/timeline_xq.json > /tmp/v/timeline_xq.log 2>&1
echo "[${SECONDS}s] timeline xq rc=$? $(grep -E 'tok/s' /tmp/v/timeline_xq.log | head -1)"
gpu_tests engine 150 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
