#!/usr/bin/env bash
# Session 21, run 2 (H200): run 1's once-read load policies (w0 = __ldg, w1 = L1::no_allocate, w2 = .cs) and the
# same policy also on the decode attention's cached K/V reads (w3 = w2 + K/V .cs, w4 = w1 + K/V no_allocate;
# REVOLTA_KV_LOAD=1). Every GPU test on w3 and w4; AWQ batch 1 twice per library, interleaved; fp16 for w0, w3,
# w4; timelines of w3 and w4.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
LIBS="w0 w1 w2 w3 w4"
for v in $LIBS; do mkdir -p /tmp/libs/$v && xz -dc .devcarry/$v.so.xz > /tmp/libs/$v/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
for v in $LIBS; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so python3 -c "import revolta_kernels as k; print(k.native_status()); assert k.native_available()" || exit 1
done
AWQ=benchmarks/configs/llama-3.1-8b-awq
FP16=benchmarks/configs/llama-3.1-8b
for v in w3 w4; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so gpu_tests kernel_tests_$v 150 packages/revolta-kernels/tests
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so gpu_tests engine_tests_$v 120 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
done
for i in 1 2; do
  for v in $LIBS; do e2e "awq_${v}_$i" $AWQ REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so; done
done
for v in w0 w3 w4; do e2e "fp16_$v" $FP16 REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so; done
for v in w3 w4; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so timeout 60 python3 benchmarks/decode_timeline.py --config $AWQ \
    --reps 3 --out /tmp/v/timeline_$v.json >/tmp/v/timeline_$v.log 2>&1
  echo "[${SECONDS}s] timeline $v rc=$? $(grep -E 'tok/s' /tmp/v/timeline_$v.log | head -1)"
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
