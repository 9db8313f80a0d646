#!/usr/bin/env bash
# On the GPU machine, from a copy of the tree (e.g. .devcarry/gpuengine/src): the engine's GPU tests, then
# the profile (host phases, kernel tables, GEMV rates) and end-to-end numbers with dummy Llama-3.1-8B
# weights. Expects REVOLTA_NATIVE_LIB to point at a librevolta_native.so built for this GPU; wheels the
# machine lacks may sit in $WHEELS. Everything lands under $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -n "${WHEELS:-}" ] && compgen -G "$WHEELS/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl
fi
export PYTHONPATH="$ROOT/packages/revolta-kernels/src:$ROOT/packages/revolta-engine/src:$ROOT/packages/revolta-engine/tests:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv | tee "$OUT/nvidia_smi.txt"
if ! python3 -c 'import sys, revolta_kernels as r; print(r.native_status()); sys.exit(not r.native_available())'; then
  BUILD=/tmp/revolta-kernels-build  # the carried library did not load here: build on this machine
  cmake -S packages/revolta-kernels -B $BUILD -G Ninja -DREVOLTA_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=Release \
    >"$OUT/build.log" 2>&1 && cmake --build $BUILD -j "$(nproc)" >>"$OUT/build.log" 2>&1 || tail -20 "$OUT/build.log"
  export REVOLTA_NATIVE_LIB=$BUILD/librevolta_native.so
fi
timeout "${PROFILE_TIMEOUT:-115}" python3 benchmarks/gpu_profile.py --out-dir "$OUT/profile" \
  --out "$OUT/gpu_e2e_graphs.json" ${E2E_ARGS:-} 2>&1 | tee "$OUT/profile.log" \
  | grep -vE "^(Loaded|GPU memory|KV cache|Captured)" | tail -150
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout "${TEST_TIMEOUT:-55}" python3 -m pytest packages/revolta-engine/tests/test_gpu_engine.py -q -m gpu \
    -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/engine_gpu_tests.log" | tail -6
fi
