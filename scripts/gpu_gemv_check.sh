#!/usr/bin/env bash
# On the GPU machine (one call, <= ~290 s): the skinny GEMV GPU tests (fp16 GEMV, fused SiLU-and-mul,
# PDL chains, engine Linear paths), benchmarks/gemv_bench.py (isolated and chained, PDL off/on), batch-1
# decode of Llama-3.1-8B fp16 (skinny GEMV, default) / AWQ g128 / fp16 with cuBLAS (the old path), then the
# quantized GEMM and engine GPU tests in the time left. Expects REVOLTA_NATIVE_LIB and PYTHONPATH set.
# Writes at most 8 files under $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
BUDGET="${GEMV_BUDGET_S:-285}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$ROOT"
left() { echo $(( BUDGET - SECONDS )); }
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import revolta_kernels as r; print(r.native_status())'
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu"
KT=packages/revolta-kernels/tests
ET=packages/revolta-engine/tests

timeout 60 $PYTEST $KT/test_gemv_gpu.py $ET/test_linear_fused.py --maxfail=30 >"$OUT/tests.log" 2>&1
echo "[${SECONDS}s] gemv tests rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -2
grep -E "^(FAILED|ERROR)|max excess" "$OUT/tests.log" | head -15

timeout 75 python3 benchmarks/gemv_bench.py --out "$OUT/gemv_bench.json" >"$OUT/gemv_bench.log" 2>&1
echo "[${SECONDS}s] gemv bench rc=$?"; grep -vE "^\s*$" "$OUT/gemv_bench.log" | tail -14

# The sweeps' choices (prefetch budget, fp16 GEMV block shape) for the engine runs; built-in defaults if absent.
export REVOLTA_QUANT_TUNE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('quant_tune', ''))" "$OUT/gemv_bench.json" 2>/dev/null)
export REVOLTA_DENSE_GEMV_TUNE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('dense_tune', ''))" "$OUT/gemv_bench.json" 2>/dev/null)
echo "engine runs with REVOLTA_QUANT_TUNE='$REVOLTA_QUANT_TUNE' REVOLTA_DENSE_GEMV_TUNE='$REVOLTA_DENSE_GEMV_TUNE'"
E2E="python3 benchmarks/gpu_e2e.py --decode-only --concurrency 1 --prefill-len 1024"
: >"$OUT/e2e.log"
timeout 45 $E2E --config benchmarks/configs/llama-3.1-8b --out "$OUT/e2e_fp16.json" >>"$OUT/e2e.log" 2>&1
echo "[${SECONDS}s] fp16 e2e (skinny GEMV) rc=$?"
timeout 45 $E2E --config benchmarks/configs/llama-3.1-8b-awq --baseline "$OUT/e2e_fp16.json" --out "$OUT/e2e_awq.json" \
  >>"$OUT/e2e.log" 2>&1
echo "[${SECONDS}s] AWQ e2e rc=$?"
REVOLTA_DENSE_GEMV_MAX_M=0 REVOLTA_FUSED_SILU=0 timeout 45 $E2E --config benchmarks/configs/llama-3.1-8b \
  --out "$OUT/e2e_fp16_cublas.json" >>"$OUT/e2e.log" 2>&1
echo "[${SECONDS}s] fp16 e2e (cuBLAS, separate silu) rc=$?"
for f in fp16 awq fp16_cublas; do
  echo "== $f"; grep -E '"(batch1_|roofline_tok|speedup)' "$OUT/e2e_$f.json" 2>/dev/null || echo "(no result)"
done
grep -iE "error|Traceback" "$OUT/e2e.log" | head -5

T=$(left); if [ "$T" -gt 15 ]; then
  timeout "$T" $PYTEST $ET/test_gpu_engine.py $ET/test_quant_models.py $KT/test_quant_gpu.py \
    -k "graph_replay_equals_eager or agrees_with_cpu or cuda_layers or split_k or repeats or large_activations" \
    >"$OUT/tests2.log" 2>&1
  echo "[${SECONDS}s] engine + quant tests rc=$?"; grep -E "passed|failed" "$OUT/tests2.log" | tail -2
  grep -E "^(FAILED|ERROR)" "$OUT/tests2.log" | head -10
fi
echo "[${SECONDS}s] done"
