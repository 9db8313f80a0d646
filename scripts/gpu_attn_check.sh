#!/usr/bin/env bash
# Device run of the attn branch (decode split plan + in-kernel merge, PDL decode launches, fused
# rotary_and_cache). Run from a copy of the branch (e.g. .devcarry/attn) that holds librevolta_native.so
# (this branch, sm_90) and optionally librevolta_native_main.so (main, for the "before" column); the repo
# root two levels up is main's tree (its python packages go with the main library).
#   1. kernels_bench (engine decode shapes with a forced-split sweep, rotary/cache, the usual cases)
#   2. gpu_e2e for the Llama-3.1-8B shape
#   3. kernel GPU tests (decode/attention/cache/rotary) and engine GPU tests, side by side
#   4. kernels_bench --engine-only with REVOLTA_PDL=0, and with main's library and code (before)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MAIN="$(cd "$ROOT/../.." && pwd)"
OUT="${OUT:-$ROOT/gpu_attn_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$ROOT"
START=$(date +%s)
left() { echo $(( ${BUDGET:-290} - ($(date +%s) - START) )); }
NEWPATH="$ROOT/packages/revolta-kernels/src:$ROOT/packages/revolta-kernels/tests:$ROOT/packages/revolta-engine/src:$ROOT/packages/revolta-engine/tests:/tmp/site"
export PYTHONPATH="$NEWPATH" REVOLTA_NATIVE_LIB="$ROOT/librevolta_native.so"
python3 -c 'import revolta_kernels as r; print(r.native_status())'

timeout 70 python3 benchmarks/kernels_bench.py --out "$OUT/bench_new.json" >"$OUT/bench_new.log" 2>&1
echo "== kernels_bench (branch) rc=$? at $(( $(date +%s) - START )) s"; grep -vE "^native" "$OUT/bench_new.log" | tail -40

t=$(( $(left) - 95 )); [ $t -gt 150 ] && t=150
timeout $t python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --out "$OUT/e2e_new.json" \
  >/tmp/e2e_new.log 2>&1
echo "== gpu_e2e rc=$? at $(( $(date +%s) - START )) s"; grep -E "tok_s|rc=|Error|error" /tmp/e2e_new.log | tail -14
if [ "$(left)" -gt 150 ]; then
  REVOLTA_PDL=0 timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b \
    --out "$OUT/e2e_pdl0.json" >/tmp/e2e_pdl0.log 2>&1
  echo "== gpu_e2e REVOLTA_PDL=0 rc=$? at $(( $(date +%s) - START )) s"; grep -E "tok_s" /tmp/e2e_pdl0.log | tail -6
fi

t=$(( $(left) - 20 )); [ $t -gt 100 ] && t=100
timeout $t python3 -m pytest packages/revolta-kernels/tests/test_native_gpu.py packages/revolta-kernels/tests/test_attention_gpu.py \
  -v -m gpu -p no:cacheprovider -o addopts="" -k "decode or attention or cache or rotary or probe" \
  >"$OUT/kernel_tests.log" 2>&1 &
KPID=$!
timeout $t python3 -m pytest packages/revolta-engine/tests/test_gpu_engine.py -q -m gpu -p no:cacheprovider \
  -o addopts="" >"$OUT/engine_tests.log" 2>&1
echo "== engine GPU tests rc=$?"; grep -E "passed|failed|^FAILED|^ERROR|Error" "$OUT/engine_tests.log" | tail -6
wait $KPID
echo "== kernel GPU tests rc=$? at $(( $(date +%s) - START )) s"
grep -cE " PASSED" "$OUT/kernel_tests.log"; grep -E " FAILED| ERROR|passed|failed" "$OUT/kernel_tests.log" | tail -15

{
  t=$(( ($(left) - 2) / 2 ))
  if [ $t -gt 8 ]; then
    REVOLTA_PDL=0 timeout $t python3 benchmarks/kernels_bench.py --engine-only --no-split-sweep \
      --out "$OUT/bench_pdl0.json" 2>&1 | grep -E "engine decode|rotary/cache"
    echo "== kernels_bench REVOLTA_PDL=0 rc=$?"
  fi
  t=$(( $(left) - 2 ))
  if [ $t -gt 8 ] && [ -f "$ROOT/librevolta_native_main.so" ]; then
    PYTHONPATH="$MAIN/packages/revolta-kernels/src:$MAIN/packages/revolta-engine/src:/tmp/site" \
      REVOLTA_NATIVE_LIB="$ROOT/librevolta_native_main.so" timeout $t python3 benchmarks/kernels_bench.py \
      --engine-only --no-split-sweep --out "$OUT/bench_main.json" 2>&1 | grep -E "native|engine decode|rotary/cache"
    echo "== kernels_bench main (before) rc=$?"
  fi
} 2>&1
echo "done at $(( $(date +%s) - START )) s"
