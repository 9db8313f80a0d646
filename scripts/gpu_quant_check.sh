#!/usr/bin/env bash
# On a GPU machine: build revolta-kernels' native library (or use a prebuilt one from REVOLTA_NATIVE_LIB), run
# the quantized GEMM GPU tests and the benchmark, writing logs/JSON under $OUT.
# Usage: scripts/gpu_quant_check.sh [archs, default 90]; QUANT_BENCH_ARGS="--sweep" times every launch variant;
# QUANT_E2E=1 also runs benchmarks/gpu_e2e.py batch-1 decode for fp16 and AWQ Llama-3.1-8B dummy weights.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
ARCHS="${1:-${REVOLTA_CUDA_ARCHS:-90}}"
PKG="$ROOT/packages/revolta-kernels"
BUILD="${REVOLTA_BUILD_DIR:-/tmp/revolta-kernels-build}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
if [ -n "${REVOLTA_NATIVE_LIB:-}" ] && [ -f "$REVOLTA_NATIVE_LIB" ]; then
  echo "using prebuilt $REVOLTA_NATIVE_LIB"
else
  start=$(date +%s)
  cmake -S "$PKG" -B "$BUILD" -G Ninja -DREVOLTA_CUDA_ARCHS="$ARCHS" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 \
    && cmake --build "$BUILD" -j "$(nproc)" >>"$OUT/build.log" 2>&1
  build_rc=$?
  echo "build rc=$build_rc in $(( $(date +%s) - start )) s"; tail -5 "$OUT/build.log"
  [ $build_rc -eq 0 ] || exit $build_rc
  export REVOLTA_NATIVE_LIB="$BUILD/librevolta_native.so"
fi
if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$ROOT"/.whl/*.whl
fi
export PYTHONPATH="$PKG/src:$PKG/tests:$ROOT/packages/revolta-engine/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import revolta_kernels as r; print(r.native_status())'
cd "$ROOT"
timeout "${QUANT_TEST_TIMEOUT:-150}" python3 -m pytest "$PKG/tests/test_quant_gpu.py" "$PKG/tests/test_quant_reference.py" \
  -q -p no:cacheprovider --maxfail=40 -o addopts="" --junitxml="$OUT/quant_gpu_tests.xml" >"$OUT/quant_gpu_tests.log" 2>&1
test_rc=$?
grep -E "passed|failed|error" "$OUT/quant_gpu_tests.log" | tail -3
grep -E "^(FAILED|ERROR)|max excess|Error" "$OUT/quant_gpu_tests.log" | head -30
timeout "${QUANT_BENCH_TIMEOUT:-120}" python3 "$ROOT/benchmarks/quant_bench.py" ${QUANT_BENCH_ARGS:-} --out "$OUT/quant_bench.json" \
  2>&1 | tee "$OUT/quant_bench.log"
bench_rc=${PIPESTATUS[0]}
e2e_rc=0
if [ -n "${QUANT_E2E:-}" ]; then
  E2E="timeout ${QUANT_E2E_TIMEOUT:-75} python3 $ROOT/benchmarks/gpu_e2e.py --decode-only --concurrency 1 --prefill-len 1024 --output-len ${E2E_TOKENS:-256}"
  $E2E --config benchmarks/configs/llama-3.1-8b --out "$OUT/gpu_e2e_fp16.json" >"$OUT/e2e_fp16.log" 2>&1
  e2e_rc=$?
  # the launch parameters the benchmark's sweep chose (if it ran with --sweep), for the AWQ engine run
  TUNE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('tune', ''))" "$OUT/quant_bench.json" 2>/dev/null)
  echo "AWQ e2e with REVOLTA_QUANT_TUNE=${TUNE:-<built-in defaults>}"
  REVOLTA_QUANT_TUNE="$TUNE" $E2E --config benchmarks/configs/llama-3.1-8b-awq --baseline "$OUT/gpu_e2e_fp16.json" --out "$OUT/gpu_e2e_awq.json" \
    >"$OUT/e2e_awq.log" 2>&1
  e2e_rc=$(( e2e_rc + $? ))
  for f in fp16 awq; do
    grep -E '"(batch1_|roofline|weight_GB|read_GB)' "$OUT/gpu_e2e_$f.json" 2>/dev/null || tail -5 "$OUT/e2e_$f.log"
  done
fi
echo "gpu_quant_check: tests=$test_rc bench=$bench_rc e2e=$e2e_rc"
exit $(( test_rc != 0 || bench_rc != 0 || e2e_rc != 0 ))
