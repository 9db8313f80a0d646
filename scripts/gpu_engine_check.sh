#!/usr/bin/env bash
# On a GPU machine: build the native kernels, run the engine's GPU tests and the end-to-end benchmark
# (CUDA graphs and eager) with dummy Llama-3.1-8B-shaped weights. Logs and JSON go under $OUT.
# Pure-Python wheels the machine lacks (gguf) are expected in .whl/ (see ../shared/device/wheels.sh).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
BUILD="${REVOLTA_BUILD_DIR:-/tmp/revolta-kernels-build}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$ROOT"/.whl/*.whl
fi
cmake -S "$ROOT/packages/revolta-kernels" -B "$BUILD" -G Ninja -DREVOLTA_CUDA_ARCHS="${REVOLTA_CUDA_ARCHS:-90}" \
  -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 && cmake --build "$BUILD" -j "$(nproc)" >>"$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 1; }
export REVOLTA_NATIVE_LIB="$BUILD/librevolta_native.so"
export PYTHONPATH="$ROOT/packages/revolta-kernels/src:$ROOT/packages/revolta-engine/src:$ROOT/packages/revolta-engine/tests:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
python3 -c 'import revolta_kernels as r; print(r.native_status())'
python3 -m pytest packages/revolta-engine/tests/test_gpu_engine.py -q -m gpu -p no:cacheprovider -o addopts="" \
  2>&1 | tee "$OUT/engine_gpu_tests.log" | tail -15
test_rc=${PIPESTATUS[0]}
python3 benchmarks/gpu_e2e.py --out "$OUT/gpu_e2e_graphs.json" ${E2E_ARGS:-} 2>&1 | tail -40 | tee "$OUT/e2e_graphs.log"
python3 benchmarks/gpu_e2e.py --enforce-eager --concurrency 64 --out "$OUT/gpu_e2e_eager.json" ${E2E_ARGS:-} 2>&1 \
  | grep -E "tok_s|fraction|roofline" | tee "$OUT/e2e_eager.log"
echo "gpu_engine_check: tests=$test_rc"
