#!/usr/bin/env bash
# build_lib.sh NAME ["CUDA FLAGS"] [ARCHS]: the native kernels of this tree built with nvcc for ARCHS (default 90)
# and those extra flags (e.g. "-lineinfo" for source lines in Nsight Compute), checked not to link libtorch,
# stripped and compressed into .devcarry/NAME.so.xz, so a device call can carry it and use it:
#   scripts/gpu_verify.sh --lib .devcarry/NAME.so.xz        (or --compare-lib, for a before/after)
# ARCHS of Volta/Turing only (e.g. "70;75") build the Volta library (librevolta_native_sm70.so) with a CUDA
# 11.x/12.x nvcc (packages/revolta-kernels/tools/install_cuda118.sh installs Debian's 11.8), for
#   scripts/gpu_verify.sh --volta .devcarry/volta.so.xz     (Volta mode, see there)
# (FLAGS "-gencode=arch=compute_70,code=sm_90" add sm_90 code compiled from the compute_70 PTX, for Volta mode on an
# H100/H200 without the driver's JIT.)
# About 2 minutes on 2 cores for one modern arch; 6 to 11 minutes for the Volta library (sm_70 + sm_75).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
name="$1"
flags="${2:-}"
archs="${3:-90}"
build="/tmp/kbuild_$name"
cmake -S "$ROOT/packages/revolta-kernels" -B "$build" -DREVOLTA_CUDA_ARCHS="$archs" -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CUDA_FLAGS=$flags" -G Ninja >"$build.log" 2>&1
cmake --build "$build" -j"$(nproc)" >>"$build.log" 2>&1
so="$build/librevolta_native.so"
[ -f "$so" ] || so="$build/volta/librevolta_native_sm70.so"  # Volta/Turing archs only: the Volta sub-build's
if [ ! -f "$so" ]; then
  echo "no library built; see $build.log:" >&2
  grep -i "warn\|error\|reference-only" "$build.log" | head -20 >&2
  exit 1
fi
if ldd "$so" | grep -qi torch; then
  echo "$so links libtorch" >&2
  exit 1
fi
strip "$so"
mkdir -p "$ROOT/.devcarry"
xz -T0 -6 -c "$so" >"$ROOT/.devcarry/$name.so.xz"
echo "built .devcarry/$name.so.xz ($(basename "$so"), $(du -h "$ROOT/.devcarry/$name.so.xz" | cut -f1)) with flags '$flags' for sm_$archs"
