#!/usr/bin/env bash
# Session 20, run 1 (H200): the act-order down projection on the gathering kernel's code (order_code hint,
# kActOrderCode). GPU tests of the quantized ops and the engine; act-order GPTQ batch 1 with the hint on and off
# (REVOLTA_ORDER_CODE), interleaved; AWQ, plain GPTQ and fp16 in the same run; the act-order per-layer timeline;
# quant_bench for issue 6's table.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs/s20 && xz -dc .devcarry/s20.so.xz > /tmp/libs/s20/librevolta_native.so
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/s20/librevolta_native.so
device_init
gpu_tests order 300 packages/revolta-kernels/tests/test_quant_order_gpu.py
gptq_config /tmp/v/gptq_true True
gptq_config /tmp/v/gptq_false False
AWQ=benchmarks/configs/llama-3.1-8b-awq
for i in 1 2 3; do
  e2e "actorder_hint_$i" /tmp/v/gptq_true REVOLTA_ORDER_CODE=1
  e2e "actorder_plain_$i" /tmp/v/gptq_true REVOLTA_ORDER_CODE=0
done
e2e awq_1 $AWQ
e2e gptq_1 /tmp/v/gptq_false
e2e fp16_1 benchmarks/configs/llama-3.1-8b
e2e awq_2 $AWQ
timeout 60 python3 benchmarks/decode_timeline.py --config /tmp/v/gptq_true --reps 3 \
  --out /tmp/v/timeline_actorder_hint.json >/tmp/v/timeline_actorder.log 2>&1
echo "[${SECONDS}s] actorder timeline rc=$? $(grep -E 'tok/s' /tmp/v/timeline_actorder.log | head -1)"
timeout 240 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >/tmp/v/quant_bench.log 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; tail -20 /tmp/v/quant_bench.log
gpu_tests quant 400 packages/revolta-kernels/tests/test_quant_gpu.py packages/revolta-kernels/tests/test_quant_norm_gpu.py
gpu_tests engine 400 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
cp /tmp/v/*.log "$OUT/" 2>/dev/null
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
