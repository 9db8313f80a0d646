#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_verify.sh: the engine's GPU tests again, batch-1 decode of the
# AWQ g128 Llama-3.1-8B shape against the fp16 run recorded by gpu_verify.sh ($BASELINE), and the
# Qwen3.5-35B-A3B-shaped hybrid MoE model. Expects REVOLTA_NATIVE_LIB and wheels in .whl/.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
BASELINE="${BASELINE:-$ROOT/benchmarks/results/h200_main_verify/gpu_e2e.json}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$ROOT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$ROOT/packages/revolta-kernels/src:$ROOT/packages/revolta-engine/src:$ROOT/packages/revolta-engine/tests:/tmp/site"
timeout "${T_ETEST:-100}" python3 -m pytest packages/revolta-engine/tests/test_gpu_engine.py \
  packages/revolta-engine/tests/test_gpu_hybrid.py packages/revolta-engine/tests/test_gpu_structured.py \
  -q -m gpu -p no:cacheprovider -o addopts="" >"$OUT/engine_gpu_tests.log" 2>&1
echo "engine GPU tests rc=$?"; grep -E "passed|failed|^FAILED|^ERROR" "$OUT/engine_gpu_tests.log" | tail -8
timeout "${T_AWQ:-100}" python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only \
  --concurrency 1 --prefill-len 1024 --baseline "$BASELINE" --out "$OUT/gpu_e2e_awq.json" >"$OUT/gpu_e2e_awq.log" 2>&1
echo "AWQ e2e rc=$?"; grep -E '"(batch1_|roofline|weight_GB|read_GB|speedup|baseline)' "$OUT/gpu_e2e_awq.json" || tail -5 "$OUT/gpu_e2e_awq.log"
timeout "${T_MOE:-100}" python3 benchmarks/hybrid_e2e.py --out "$OUT/hybrid_e2e.json" >"$OUT/hybrid_e2e.log" 2>&1
echo "hybrid e2e rc=$?"; grep -vE "^(Loaded|Captured)" "$OUT/hybrid_e2e.log" | tail -15
