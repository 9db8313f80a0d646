#!/usr/bin/env bash
# build_lib.sh NAME ["CUDA FLAGS"] [ARCHS]: the native kernels of this tree built with nvcc for ARCHS (default 90)
# and those extra flags (e.g. "-lineinfo" for source lines in Nsight Compute), checked not to link libtorch,
# stripped and compressed into .devcarry/NAME.so.xz, so a device call can carry it and use it:
#   scripts/gpu_verify.sh --lib .devcarry/NAME.so.xz        (or --compare-lib, for a before/after)
# About 2 minutes on 2 cores for one arch.
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
if ldd "$so" | grep -qi torch; then
  echo "$so links libtorch" >&2
  exit 1
fi
strip "$so"
mkdir -p "$ROOT/.devcarry"
xz -T0 -6 -c "$so" >"$ROOT/.devcarry/$name.so.xz"
echo "built .devcarry/$name.so.xz ($(du -h "$ROOT/.devcarry/$name.so.xz" | cut -f1)) with flags '$flags' for sm_$archs"
