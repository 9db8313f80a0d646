#!/usr/bin/env bash
# On the GPU machine: one verification pass of main with a library built elsewhere (REVOLTA_NATIVE_LIB):
# every kernel GPU test, the engine GPU tests (graphs, hybrid, structured output), the kernel benchmark and
# the end-to-end Llama-3.1-8B-shape benchmark. Wheels the machine lacks are expected in .whl/.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$ROOT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$ROOT/packages/revolta-kernels/src:$ROOT/packages/revolta-kernels/tests:$ROOT/packages/revolta-engine/src:$ROOT/packages/revolta-engine/tests:/tmp/site"
python3 -c 'import revolta_kernels as r; print(r.native_status())'
t0=$(date +%s)
timeout "${T_KTEST:-150}" python3 -m pytest packages/revolta-kernels/tests -q -m gpu -p no:cacheprovider -o addopts="" \
  -x --maxfail=20 >"$OUT/kernel_gpu_tests.log" 2>&1
echo "kernel GPU tests rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|^FAILED|^ERROR" "$OUT/kernel_gpu_tests.log" | tail -8
t0=$(date +%s)
timeout "${T_ETEST:-90}" python3 -m pytest packages/revolta-engine/tests/test_gpu_engine.py \
  packages/revolta-engine/tests/test_gpu_hybrid.py packages/revolta-engine/tests/test_gpu_structured.py \
  -q -m gpu -p no:cacheprovider -o addopts="" >"$OUT/engine_gpu_tests.log" 2>&1
echo "engine GPU tests rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|^FAILED|^ERROR|Error" "$OUT/engine_gpu_tests.log" | tail -8
timeout "${T_BENCH:-60}" python3 benchmarks/kernels_bench.py --out "$OUT/kernels_bench.json" >"$OUT/kernels_bench.log" 2>&1
echo "kernels_bench rc=$?"; tail -25 "$OUT/kernels_bench.log"
timeout "${T_E2E:-120}" python3 benchmarks/gpu_e2e.py --out "$OUT/gpu_e2e.json" ${E2E_ARGS:-} >"$OUT/gpu_e2e.log" 2>&1
echo "gpu_e2e rc=$?"; grep -vE "^(Loaded|Captured)" "$OUT/gpu_e2e.log" | tail -25
