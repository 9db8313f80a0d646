#!/usr/bin/env bash
# Session 21, run 3 (H200): issue 6's table with main's kernels (w3 of run 2 = the new defaults: .cs weights and K/V)
# - quant_bench, AWQ / fp16 batch 1 twice each, GPTQ with and without act-order - and the tile-major qweight
# experiment (library wt = main + REVOLTA_EXP_TILED in the split-K kernel; benchmarks/tiled_probe.py).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
for v in w3 wt; do mkdir -p /tmp/libs/$v && xz -dc .devcarry/$v.so.xz > /tmp/libs/$v/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
for v in w3 wt; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so python3 -c "import revolta_kernels as k; print(k.native_status()); assert k.native_available()" || exit 1
done
export REVOLTA_NATIVE_LIB=/tmp/libs/w3/librevolta_native.so
AWQ=benchmarks/configs/llama-3.1-8b-awq
FP16=benchmarks/configs/llama-3.1-8b
gptq_config /tmp/v/gptq_true True
gptq_config /tmp/v/gptq_false False
timeout 120 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >/tmp/v/quant_bench.log 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; grep -E "copy|K=" /tmp/v/quant_bench.log
for i in 1 2; do e2e "awq_$i" $AWQ; e2e "fp16_$i" $FP16; done
e2e gptq_plain /tmp/v/gptq_false
e2e gptq_actorder /tmp/v/gptq_true
(cd benchmarks && REVOLTA_NATIVE_LIB=/tmp/libs/wt/librevolta_native.so timeout 240 python3 tiled_probe.py \
  --out /tmp/v/tiled.json > /tmp/v/tiled.log 2>&1)
echo "[${SECONDS}s] tiled_probe rc=$?"; cat /tmp/v/tiled.log | tail -12
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
