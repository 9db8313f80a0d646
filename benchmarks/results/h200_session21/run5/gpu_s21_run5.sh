#!/usr/bin/env bash
# Session 21, run 5 (H200): an L2 prefetch of the decode attention's K/V pages issued by the q/k/v projection's
# blocks before their PDL wait (run5/kv_prefetch.patch; REVOLTA_KV_PREFETCH=1). The attention kernel (207 registers
# x 256 threads) cannot share an SM with any q/k/v block (80 x 256), so its own K/V loads start only as the
# projection's blocks exit. w3 = main's library; wk = main + the experiment. AWQ batch 1 interleaved, a timeline,
# and the engine GPU tests with the prefetch on.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
for v in w3 wk; do mkdir -p /tmp/libs/$v && xz -dc .devcarry/$v.so.xz > /tmp/libs/$v/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
for v in w3 wk; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so python3 -c "import revolta_kernels as k; print(k.native_status()); assert k.native_available()" || exit 1
done
AWQ=benchmarks/configs/llama-3.1-8b-awq
for i in 1 2; do
  e2e "w3_$i" $AWQ REVOLTA_NATIVE_LIB=/tmp/libs/w3/librevolta_native.so
  e2e "wk_off_$i" $AWQ REVOLTA_NATIVE_LIB=/tmp/libs/wk/librevolta_native.so
  e2e "wk_on_$i" $AWQ REVOLTA_NATIVE_LIB=/tmp/libs/wk/librevolta_native.so REVOLTA_KV_PREFETCH=1
done
REVOLTA_NATIVE_LIB=/tmp/libs/wk/librevolta_native.so REVOLTA_KV_PREFETCH=1 timeout 60 python3 benchmarks/decode_timeline.py \
  --config $AWQ --reps 3 --out /tmp/v/timeline_wk_on.json >/tmp/v/timeline_wk_on.log 2>&1
echo "[${SECONDS}s] timeline wk_on rc=$? $(grep -E 'tok/s' /tmp/v/timeline_wk_on.log | head -1)"
REVOLTA_NATIVE_LIB=/tmp/libs/wk/librevolta_native.so REVOLTA_KV_PREFETCH=1 gpu_tests engine_tests_wk_on 120 \
  $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
