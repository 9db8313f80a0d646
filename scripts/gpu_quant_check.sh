#!/usr/bin/env bash
# On a GPU machine: build revolta-kernels' native library, run the quantized GEMM GPU tests and benchmark,
# writing logs/JSON under $OUT. Usage: scripts/gpu_quant_check.sh [archs, default 90]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
ARCHS="${1:-${REVOLTA_CUDA_ARCHS:-90}}"
PKG="$ROOT/packages/revolta-kernels"
BUILD="${REVOLTA_BUILD_DIR:-/tmp/revolta-kernels-build}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
start=$(date +%s)
cmake -S "$PKG" -B "$BUILD" -G Ninja -DREVOLTA_CUDA_ARCHS="$ARCHS" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 \
  && cmake --build "$BUILD" -j "$(nproc)" >>"$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc in $(( $(date +%s) - start )) s"; tail -5 "$OUT/build.log"
[ $build_rc -eq 0 ] || exit $build_rc
export REVOLTA_NATIVE_LIB="$BUILD/librevolta_native.so"
export PYTHONPATH="$PKG/src:$PKG/tests${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import revolta_kernels as r; print(r.native_status())'
cd "$ROOT"
timeout "${QUANT_TEST_TIMEOUT:-150}" python3 -m pytest "$PKG/tests/test_quant_gpu.py" "$PKG/tests/test_quant_reference.py" \
  -q -p no:cacheprovider --maxfail=40 -o addopts="" --junitxml="$OUT/quant_gpu_tests.xml" >"$OUT/quant_gpu_tests.log" 2>&1
test_rc=$?
grep -E "passed|failed|error" "$OUT/quant_gpu_tests.log" | tail -3
grep -E "^(FAILED|ERROR)|max excess" "$OUT/quant_gpu_tests.log" | head -30
timeout "${QUANT_BENCH_TIMEOUT:-120}" python3 "$ROOT/benchmarks/quant_bench.py" --out "$OUT/quant_bench.json" 2>&1 \
  | tee "$OUT/quant_bench.log"
bench_rc=${PIPESTATUS[0]}
echo "gpu_quant_check: build=$build_rc tests=$test_rc bench=$bench_rc"
exit $(( test_rc != 0 || bench_rc != 0 ))
