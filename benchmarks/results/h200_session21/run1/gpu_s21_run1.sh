#!/usr/bin/env bash
# Session 21, run 1 (H200): the cache policy of the decode GEMVs' once-read loads (weights, scales, zero points;
# csrc/weight_load.cuh, REVOLTA_WEIGHT_LOAD at build time). Libraries: w0 = __ldg (main), w1 =
# ld.global.nc.L1::no_allocate, w2 = ld.global.cs.nc. Each: the quantized GPU tests (w1, w2), quant_bench (issue 6's
# M=1 / M=4096 table), AWQ batch 1 twice and fp16 batch 1 once, interleaved across the libraries.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
for v in w0 w1 w2; do mkdir -p /tmp/libs/$v && xz -dc .devcarry/$v.so.xz > /tmp/libs/$v/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
for v in w0 w1 w2; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so python3 -c "import revolta_kernels as k; print(k.native_status()); assert k.native_available()" || exit 1
done
AWQ=benchmarks/configs/llama-3.1-8b-awq
FP16=benchmarks/configs/llama-3.1-8b
for v in w1 w2; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so gpu_tests tests_$v 120 \
    packages/revolta-kernels/tests/test_quant_gpu.py packages/revolta-kernels/tests/test_quant_norm_gpu.py \
    packages/revolta-kernels/tests/test_quant_order_gpu.py
done
for v in w0 w1 w2; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so timeout 120 python3 benchmarks/quant_bench.py \
    --out /tmp/v/quant_bench_$v.json >/tmp/v/quant_bench_$v.log 2>&1
  echo "[${SECONDS}s] quant_bench $v rc=$?"; grep -E "x|copy" /tmp/v/quant_bench_$v.log | tail -14
done
for i in 1 2; do
  for v in w0 w1 w2; do e2e "awq_${v}_$i" $AWQ REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so; done
done
for v in w0 w1 w2; do e2e "fp16_$v" $FP16 REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so; done
for v in w0 w1; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so timeout 60 python3 benchmarks/decode_timeline.py --config $AWQ \
    --reps 3 --out /tmp/v/timeline_$v.json >/tmp/v/timeline_$v.log 2>&1
  echo "[${SECONDS}s] timeline $v rc=$? $(grep -E 'tok/s' /tmp/v/timeline_$v.log | head -1)"
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
