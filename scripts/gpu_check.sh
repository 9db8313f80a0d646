#!/usr/bin/env bash
# On a GPU machine: build revolta-kernels' native library (cmake, no pip), run the GPU tests and the kernel
# benchmarks, and write logs/JSON under $OUT. Usage: scripts/gpu_check.sh [archs, default 90]
# REVOLTA_NATIVE_LIB=path: use a library built elsewhere (built here only if it does not load);
# REVOLTA_SWEEP=1: also time every attention kernel variant; REVOLTA_PROFILE=1: ncu of the attention
# kernels (REVOLTA_PROFILE_TIMEOUT seconds, default 240).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
ARCHS="${1:-${REVOLTA_CUDA_ARCHS:-90}}"
PKG="$ROOT/packages/revolta-kernels"
BUILD="${REVOLTA_BUILD_DIR:-/tmp/revolta-kernels-build}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
start=$(date +%s)
build_rc=0
if [ -n "${REVOLTA_NATIVE_LIB:-}" ] && python3 -c "import ctypes,sys; ctypes.CDLL(sys.argv[1])" "$REVOLTA_NATIVE_LIB"; then
  echo "using prebuilt $REVOLTA_NATIVE_LIB"
else
  cmake -S "$PKG" -B "$BUILD" -G Ninja -DREVOLTA_CUDA_ARCHS="$ARCHS" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 \
    && cmake --build "$BUILD" -j "$(nproc)" >>"$OUT/build.log" 2>&1
  build_rc=$?
  echo "build rc=$build_rc in $(( $(date +%s) - start )) s"; tail -5 "$OUT/build.log"
  [ $build_rc -eq 0 ] || exit $build_rc
  export REVOLTA_NATIVE_LIB="$BUILD/librevolta_native.so"
fi
export PYTHONPATH="$PKG/src:$PKG/tests${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import revolta_kernels as r; print(r.native_status())'
cd "$ROOT"
python3 -m pytest "$PKG/tests" -q -m gpu -p no:cacheprovider --maxfail=40 -o addopts="" \
  --junitxml="$OUT/gpu_tests.xml" >"$OUT/gpu_tests.log" 2>&1
test_rc=$?
grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -3
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20
sweep=""; [ "${REVOLTA_SWEEP:-0}" = 1 ] && sweep=--sweep
(cd "$ROOT/benchmarks" && python3 kernels_bench.py --out "$OUT/kernels_bench.json" $sweep) 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
if [ "${REVOLTA_PROFILE:-0}" = 1 ] && command -v ncu >/dev/null; then
  (cd "$ROOT/benchmarks" && timeout "${REVOLTA_PROFILE_TIMEOUT:-240}" ncu --clock-control none --kernel-name regex:"paged_" --launch-count 3 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats python3 kernels_profile.py >"$OUT/ncu.txt" 2>&1)
  grep -E "paged_|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Theoretical Occ|Warp Cycles Per Issued|Issued Warp" "$OUT/ncu.txt" | head -60
fi
echo "gpu_check: build=$build_rc tests=$test_rc bench=$bench_rc"
exit $(( test_rc != 0 || bench_rc != 0 ))
