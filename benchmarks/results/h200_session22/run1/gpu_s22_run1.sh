#!/usr/bin/env bash
# Session 22, run 1 (H200): int8 activations with dp4a dot products in the split-K int4 GEMV (csrc/quant_gemv_xq.cuh,
# tune flag 16), and the group index by shift instead of a division in both paths. w3 = main's library (session 21);
# wx = this change. Tests first (correctness of both paths), then M=1 chains A/B, quant_bench's bars, AWQ batch 1.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs w3 wx
WX=$(lib wx); W3=$(lib w3)
XQ="0,0,1,-1,-1,-1,0,0,-1,22"
REVOLTA_NATIVE_LIB=/tmp/libs/wx/librevolta_native.so gpu_tests quant_wx 300 packages/revolta-kernels/tests/test_quant_xq_gpu.py \
  packages/revolta-kernels/tests/test_quant_gpu.py packages/revolta-kernels/tests/test_quant_norm_gpu.py \
  packages/revolta-kernels/tests/test_quant_order_gpu.py
for v in w3 wx; do
  env $(lib $v) timeout 120 python3 benchmarks/gemv_flags_ab.py --flags 6,22 --out /tmp/v/ab_$v.json \
    --chains 4096x14336,llama8b_32_layers,4096x4096 > /tmp/v/ab_$v.log 2>&1
  echo "[${SECONDS}s] flags A/B $v rc=$?"; cat /tmp/v/ab_$v.log
done
for t in default xq; do
  tune=""; [ $t = xq ] && tune=$XQ
  env $WX REVOLTA_QUANT_TUNE="$tune" timeout 90 python3 benchmarks/quant_bench.py --out /tmp/v/qb_$t.json > /tmp/v/qb_$t.log 2>&1
  echo "[${SECONDS}s] quant_bench wx $t rc=$?"; grep -E "copy|M=1" /tmp/v/qb_$t.log
done
AWQ=benchmarks/configs/llama-3.1-8b-awq
for i in 1 2; do
  e2e "w3_$i" $AWQ $W3
  e2e "wx_$i" $AWQ $WX
  e2e "wx_xq_$i" $AWQ $WX REVOLTA_QUANT_TUNE=$XQ
done
e2e fp16 benchmarks/configs/llama-3.1-8b $WX
env $WX REVOLTA_QUANT_TUNE=$XQ timeout 60 python3 benchmarks/decode_timeline.py --config $AWQ --reps 3 \
  --out /tmp/v/timeline_xq.json > /tmp/v/timeline_xq.log 2>&1
echo "[${SECONDS}s] timeline xq rc=$? $(grep -E 'tok/s' /tmp/v/timeline_xq.log | head -1)"
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
