#!/usr/bin/env bash
# Device run of branch quant (issue 6): GPU tests of the fused add + RMSNorm int4 GEMV (and the quantized
# kernels it touches), quant_norm_bench.py (plan sweep on 4096-class chains, Llama-8B 32-layer chains with the
# norm separate / fused), gemv_bench.py (awq, llama8b), and Llama-3.1-8B batch-1 decode end to end: fp16, AWQ
# g128 (REVOLTA_FUSED_NORM=1, the default) and AWQ with REVOLTA_FUSED_NORM=0 (A/B), plus optional extra AWQ
# runs with REVOLTA_QUANT_TUNE variants ($QN_TUNES, space-separated), and optionally the quantized GPU tests
# again with the split-K-free kernel forced wherever it exists ($QN_FULL_TESTS). Expects PYTHONPATH and REVOLTA_NATIVE_LIB
# set by the caller. At most 8 files under $OUT: run.log, tests.log, bench.log and the JSONs.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT" /tmp/qn
export PYTHONUNBUFFERED=1
cd "$ROOT"
exec > >(tee "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import revolta_kernels as r, torch; print(r.native_status(), torch.__version__)'
PYTEST="python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts= --tb=short --maxfail=20"
K=packages/revolta-kernels/tests E=packages/revolta-engine/tests

timeout "${T_TEST:-100}" $PYTEST $K/test_quant_norm_gpu.py $E/test_linear_quant_norm.py $E/test_linear_fused.py \
  ${QN_MORE_TESTS:-} >"$OUT/tests.log" 2>&1
echo "[${SECONDS}s] GPU tests rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -15
if [ -n "${QN_FULL_TESTS:-}" ]; then  # the same quantized tests with the split-K-free kernel wherever it exists
  REVOLTA_QUANT_TUNE=0,0,1,-1,-1,-1,0,0,1 timeout "${T_TEST2:-60}" $PYTEST $QN_FULL_TESTS >>"$OUT/tests.log" 2>&1
  echo "[${SECONDS}s] GPU tests with REVOLTA_QUANT_TUNE=0,0,1,-1,-1,-1,0,0,1 rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -1
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | tail -10
fi

timeout "${T_QNB:-70}" python3 benchmarks/quant_norm_bench.py ${QNB_ARGS:-} --out "$OUT/quant_norm_bench.json" \
  >/tmp/qn/quant_norm_bench.log 2>&1
echo "[${SECONDS}s] quant_norm_bench rc=$?"; cat /tmp/qn/quant_norm_bench.log | tail -14

timeout "${T_GEMV:-40}" python3 benchmarks/gemv_bench.py --sections awq,llama8b --out /tmp/qn/gemv_bench.json \
  >/tmp/qn/gemv_bench.log 2>&1
echo "[${SECONDS}s] gemv_bench rc=$?"; grep -vE "^\s*$" /tmp/qn/gemv_bench.log | tail -12

E2E="python3 benchmarks/gpu_e2e.py --decode-only --concurrency 1 --prefill-len 1024"
show() { grep -E '"(batch1_decode|batch1_fraction|roofline_tok|speedup|copy_band)' "$1" || tail -5 "$2"; }
timeout "${T_E2E:-45}" $E2E --config benchmarks/configs/llama-3.1-8b --out /tmp/qn/e2e_fp16.json >/tmp/qn/e2e_fp16.log 2>&1
echo "[${SECONDS}s] e2e fp16 rc=$?"; show /tmp/qn/e2e_fp16.json /tmp/qn/e2e_fp16.log
timeout "${T_E2E:-45}" $E2E --config benchmarks/configs/llama-3.1-8b-awq --baseline /tmp/qn/e2e_fp16.json \
  --out /tmp/qn/e2e_awq.json >/tmp/qn/e2e_awq.log 2>&1
echo "[${SECONDS}s] e2e AWQ (fused norm) rc=$?"; show /tmp/qn/e2e_awq.json /tmp/qn/e2e_awq.log
REVOLTA_FUSED_NORM=0 timeout "${T_E2E:-45}" $E2E --config benchmarks/configs/llama-3.1-8b-awq --baseline /tmp/qn/e2e_fp16.json \
  --out /tmp/qn/e2e_awq_nofusednorm.json >/tmp/qn/e2e_awq_nofusednorm.log 2>&1
echo "[${SECONDS}s] e2e AWQ REVOLTA_FUSED_NORM=0 rc=$?"; show /tmp/qn/e2e_awq_nofusednorm.json /tmp/qn/e2e_awq_nofusednorm.log
i=0
for t in ${QN_TUNES:-}; do
  i=$((i + 1))
  REVOLTA_QUANT_TUNE=$t timeout "${T_E2E:-45}" $E2E --config benchmarks/configs/llama-3.1-8b-awq --baseline /tmp/qn/e2e_fp16.json \
    --out /tmp/qn/e2e_awq_tune$i.json >/tmp/qn/e2e_awq_tune$i.log 2>&1
  echo "[${SECONDS}s] e2e AWQ REVOLTA_QUANT_TUNE=$t rc=$?"; show /tmp/qn/e2e_awq_tune$i.json /tmp/qn/e2e_awq_tune$i.log
done

python3 "$(dirname "$0")/merge_results.py" "$OUT/results.json" /tmp/qn/*.json
cat /tmp/qn/*.log > "$OUT/bench.log"
echo "[${SECONDS}s] done"
