#!/usr/bin/env bash
# On the GPU machine (one call, <= ~270 s): the skinny GEMV GPU tests (fp16 GEMV, fused SiLU-and-mul, split
# plans, PDL chains, engine Linear paths), benchmarks/gemv_bench.py (isolated and chained, PDL off/on,
# sweeps), batch-1 decode of Llama-3.1-8B: fp16 (skinny GEMV, default) / AWQ g128 / AWQ with PDL off / fp16
# with cuBLAS (the old path) / fp16 with the dense fused SiLU, a torch-profiler kernel table of the AWQ
# decode step, then the quantized GEMM and engine GPU tests in the time left.
# Expects REVOLTA_NATIVE_LIB and PYTHONPATH set. Writes at most 8 files under $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
BUDGET="${GEMV_BUDGET_S:-270}"
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
echo "[${SECONDS}s] gemv tests rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -1
grep -E "^(FAILED|ERROR)|max excess" "$OUT/tests.log" | head -12

timeout 75 python3 benchmarks/gemv_bench.py --out "$OUT/gemv_bench.json" >"$OUT/gemv_bench.log" 2>&1
echo "[${SECONDS}s] gemv bench rc=$?"; grep -vE "^\s*$" "$OUT/gemv_bench.log" | tail -22

# The sweeps' choices (split share / prefetch, fp16 GEMV block shape) for the engine runs.
export REVOLTA_QUANT_TUNE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('quant_tune', ''))" "$OUT/gemv_bench.json" 2>/dev/null)
export REVOLTA_DENSE_GEMV_TUNE=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('dense_tune', ''))" "$OUT/gemv_bench.json" 2>/dev/null)
echo "engine runs with REVOLTA_QUANT_TUNE='$REVOLTA_QUANT_TUNE' REVOLTA_DENSE_GEMV_TUNE='$REVOLTA_DENSE_GEMV_TUNE'"
E2E="python3 benchmarks/gpu_e2e.py --decode-only --concurrency 1 --prefill-len 1024"
F16=benchmarks/configs/llama-3.1-8b
AWQ=benchmarks/configs/llama-3.1-8b-awq
mkdir -p /tmp/e2e
: >"$OUT/e2e.log"
run_e2e() {  # name, env assignments..., then -- gpu_e2e args
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo "== $name (${envs[*]:-defaults})" >>"$OUT/e2e.log"
  env "${envs[@]}" timeout 45 $E2E "$@" --out "/tmp/e2e/$name.json" >>"$OUT/e2e.log" 2>&1
  echo "[${SECONDS}s] e2e $name rc=$?"
}
run_e2e fp16 -- --config $F16
run_e2e awq -- --config $AWQ --baseline /tmp/e2e/fp16.json
run_e2e awq_nopdl REVOLTA_PDL=0 -- --config $AWQ --baseline /tmp/e2e/fp16.json
run_e2e fp16_cublas REVOLTA_DENSE_GEMV_MAX_M=0 REVOLTA_FUSED_SILU=0 -- --config $F16
run_e2e fp16_fused_silu_dense REVOLTA_FUSED_SILU_DENSE=1 -- --config $F16
python3 - "$OUT/e2e_all.json" /tmp/e2e/*.json <<'EOF'
import json, sys, pathlib
res = {pathlib.Path(p).stem: json.loads(pathlib.Path(p).read_text()) for p in sys.argv[2:]}
pathlib.Path(sys.argv[1]).write_text(json.dumps(res, indent=2))
for k, v in res.items():
    print(f"{k:24s} batch-1 {v.get('batch1_decode_tok_s', 0):7.1f} tok/s = {100 * v.get('batch1_fraction_of_roofline', 0):5.1f}% "
          f"of roofline {v.get('roofline_tok_s', 0):.0f}; vs baseline {v.get('batch1_speedup_over_baseline', '-')}")
EOF
grep -iE "error|Traceback" "$OUT/e2e.log" | head -5

T=$(left); if [ "$T" -gt 80 ]; then
  timeout $(( T - 45 )) python3 benchmarks/gpu_profile.py --config $AWQ --decode-only --concurrency 1 --prefill-len 1024 \
    --out-dir /tmp/profile --out /tmp/profile_e2e.json >"$OUT/profile.log" 2>&1
  echo "[${SECONDS}s] AWQ profile rc=$?"
  cp /tmp/profile/summary.txt "$OUT/profile_summary.txt" 2>/dev/null
  cp /tmp/profile/kernels_decode_batch1.txt "$OUT/profile_kernels_b1.txt" 2>/dev/null
  head -40 "$OUT/profile_kernels_b1.txt" 2>/dev/null
fi

T=$(left); if [ "$T" -gt 15 ]; then
  timeout "$T" $PYTEST $ET/test_gpu_engine.py $ET/test_quant_models.py $KT/test_quant_gpu.py \
    -k "graph_replay_equals_eager or agrees_with_cpu or cuda_layers or split_k or repeats or large_activations or native_matches_reference or skinny_variants" \
    >>"$OUT/tests.log" 2>&1
  echo "[${SECONDS}s] engine + quant tests rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -1
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | tail -10
fi
echo "[${SECONDS}s] done"
