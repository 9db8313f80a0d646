#!/usr/bin/env bash
# On a GPU machine, from a carried tree (scripts/carry_hybrid.sh makes it): the hybrid kernels' GPU tests, their
# benchmarks, the Qwen3.5-35B-A3B-shaped batch-1 decode benchmark and the engine's hybrid GPU tests, each under
# its own time limit so one stage running long still leaves the others' results. Logs and JSON go under $OUT.
# Uses the prebuilt librevolta_native.so next to this tree (REVOLTA_NATIVE_LIB) and wheels in whl/.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G "$ROOT/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$ROOT"/whl/*.whl
fi
export REVOLTA_NATIVE_LIB="${REVOLTA_NATIVE_LIB:-$ROOT/librevolta_native.so}"
K="$ROOT/packages/revolta-kernels" E="$ROOT/packages/revolta-engine"
export PYTHONPATH="$K/src:$E/src:$K/tests:$E/tests:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import revolta_kernels as r, torch, transformers; print(r.native_status(), torch.__version__, transformers.__version__)'
PYTEST=(python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" --tb=short --maxfail=25)
stage() {  # stage NAME SECONDS CMD...: run with a time limit, log to $OUT/NAME.log, show the end
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc in $(( $(date +%s) - t0 )) s"
  grep -E "^(FAILED|ERROR)|passed|failed|error|Error" "$OUT/$name.log" | grep -v "^  " | tail -${TAIL:-12}
  return $rc
}
[ -n "${SKIP_KTEST:-}" ] || stage kernel_tests "${T_KTEST:-60}" "${PYTEST[@]}" "$K/tests/test_hybrid_gpu.py"
[ -n "${SKIP_BENCH:-}" ] || { stage bench "${T_BENCH:-45}" python3 benchmarks/hybrid_bench.py --out "$OUT/hybrid_bench.json"; \
  tail -2 "$OUT/bench.log"; }
[ -n "${SKIP_E2E:-}" ] || { stage e2e "${T_E2E:-75}" python3 benchmarks/hybrid_e2e.py --out "$OUT/hybrid_e2e.json"; \
  grep -E "tok_s|fraction|_ms|GB\"|cuda_graphs|build_s" "$OUT/e2e.log" | head -20; }
[ -n "${SKIP_ETEST:-}" ] || stage engine_tests "${T_ETEST:-60}" "${PYTEST[@]}" "$E/tests/test_gpu_hybrid.py"
exit 0
