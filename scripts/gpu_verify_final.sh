#!/usr/bin/env bash
# On the GPU machine: one verification pass of main after the merges, with a library built elsewhere
# (REVOLTA_NATIVE_LIB, PYTHONPATH set by the caller): every kernel GPU test, the engine GPU tests, the
# attention and GEMV benchmarks, then Llama-3.1-8B fp16 end to end (batch 1, 64 concurrent, 8K prefill),
# AWQ g128 batch 1 against that fp16 run, and the Qwen3.5-35B-A3B-shaped hybrid MoE model.
# Wheels the device lacks go in .whl/: `../shared/device/wheels.sh xgrammar apache-tvm-ffi` (xgrammar 0.2.9
# imports tvm_ffi). Writes at most 8 files under $OUT: verify.log (this script's summary) and the logs/JSON named below.
# A/B runs (space-separated lists): ENGINE_AB="NAME=V ..." (engine GPU tests again), AWQ_AB / FP16_AB
# ="A=1;B=0 C=2 ..." (batch-1 decode again, switches of one run joined by ;), HYBRID_AB="NAME=V ...";
# ARGMAX=1 adds the argmax benchmark. The AWQ decode timeline (decode_timeline.py) ends the run.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT" /tmp/v
export PYTHONUNBUFFERED=1
cd "$ROOT"
exec > >(tee "$OUT/verify.log") 2>&1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import revolta_kernels as r; print(r.native_status())'
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu"

timeout "${T_KTEST:-120}" $PYTEST packages/revolta-kernels/tests --maxfail=30 >"$OUT/kernel_gpu_tests.log" 2>&1
echo "[${SECONDS}s] kernel GPU tests rc=$?"; grep -E "passed|failed" "$OUT/kernel_gpu_tests.log" | tail -1
grep -E "^(FAILED|ERROR)" "$OUT/kernel_gpu_tests.log" | head -15

ENGINE_GPU_TESTS="$(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py | tr '\n' ' ')"
timeout "${T_ETEST:-100}" $PYTEST $ENGINE_GPU_TESTS >"$OUT/engine_gpu_tests.log" 2>&1
echo "[${SECONDS}s] engine GPU tests rc=$?"; grep -E "passed|failed" "$OUT/engine_gpu_tests.log" | tail -1
grep -E "^(FAILED|ERROR)|Error" "$OUT/engine_gpu_tests.log" | head -10
for ab in ${ENGINE_AB:-}; do  # NAME=VALUE env switches: the engine GPU tests again under each
  env "$ab" timeout "${T_ETEST:-100}" $PYTEST $ENGINE_GPU_TESTS >"/tmp/v/engine_gpu_tests_${ab%%=*}.log" 2>&1
  echo "[${SECONDS}s] engine GPU tests with $ab rc=$?"; grep -E "passed|failed" "/tmp/v/engine_gpu_tests_${ab%%=*}.log" | tail -1
  grep -E "^(FAILED|ERROR)" "/tmp/v/engine_gpu_tests_${ab%%=*}.log" | head -6
done

timeout "${T_KBENCH:-60}" python3 benchmarks/kernels_bench.py --no-split-sweep --out /tmp/v/kernels_bench.json >/tmp/v/kernels_bench.log 2>&1
echo "[${SECONDS}s] kernels_bench rc=$?"; grep -vE "^\s*$" /tmp/v/kernels_bench.log | tail -24

timeout "${T_GEMV:-70}" python3 benchmarks/gemv_bench.py --sections awq,dense,llama8b --out /tmp/v/gemv_bench.json >/tmp/v/gemv_bench.log 2>&1
echo "[${SECONDS}s] gemv_bench rc=$?"; grep -vE "^\s*$" /tmp/v/gemv_bench.log | tail -22

if [ -n "${ARGMAX:-}" ]; then
  timeout 40 python3 benchmarks/argmax_bench.py --out /tmp/v/argmax_bench.json >/tmp/v/argmax_bench.log 2>&1
  echo "[${SECONDS}s] argmax bench rc=$?"; tail -2 /tmp/v/argmax_bench.log
fi

timeout "${T_E2E:-120}" python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --out /tmp/v/gpu_e2e.json \
  >/tmp/v/gpu_e2e.log 2>&1
echo "[${SECONDS}s] gpu_e2e fp16 rc=$?"
grep -E '"(batch1_decode|batch1_fraction|concurrent64|prefill8192|kv_capacity|roofline_tok|copy_band)' /tmp/v/gpu_e2e.json \
  || tail -5 /tmp/v/gpu_e2e.log

timeout "${T_AWQ:-60}" python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only --concurrency 1 \
  --prefill-len 1024 --baseline /tmp/v/gpu_e2e.json --out /tmp/v/gpu_e2e_awq.json >/tmp/v/gpu_e2e_awq.log 2>&1
echo "[${SECONDS}s] AWQ e2e rc=$?"
grep -E '"(batch1_decode|batch1_fraction|roofline_tok|speedup)' /tmp/v/gpu_e2e_awq.json || tail -5 /tmp/v/gpu_e2e_awq.log

# decode_ab LABEL CONFIG SWITCHES [gpu_e2e args...]: batch-1 decode again under SWITCHES (A;B;...: semicolon-
# separated NAME=VALUE), into /tmp/v/ab_LABEL_<switches>.json
decode_ab() {
  local label="$1" config="$2" ab="$3" tag
  shift 3
  tag="$(echo "$ab" | tr ';=,' '___')"
  env $(echo "$ab" | tr ';' ' ') timeout 60 python3 benchmarks/gpu_e2e.py --config "$config" --decode-only \
    --concurrency 1 --prefill-len 1024 --out "/tmp/v/ab_${label}_$tag.json" "$@" >"/tmp/v/ab_${label}_$tag.log" 2>&1
  echo "[${SECONDS}s] $label $ab rc=$?"; grep -E '"batch1_(decode|fraction_of_roofline)"' "/tmp/v/ab_${label}_$tag.json"
}
for ab in ${AWQ_AB:-}; do decode_ab awq benchmarks/configs/llama-3.1-8b-awq "$ab" --baseline /tmp/v/gpu_e2e.json; done
for ab in ${FP16_AB:-}; do decode_ab fp16 benchmarks/configs/llama-3.1-8b "$ab"; done
for ab in ${HYBRID_AB:-}; do  # NAME=VALUE env switches, one hybrid run each
  env "$ab" timeout 80 python3 benchmarks/hybrid_e2e.py --out "/tmp/v/ab_hybrid_${ab%%=*}.json" >"/tmp/v/ab_hybrid_${ab%%=*}.log" 2>&1
  echo "[${SECONDS}s] hybrid $ab rc=$?"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: v for k, v in d.items() if 'tok_s' in k or 'fraction' in k or k.endswith('_ms')})" "/tmp/v/ab_hybrid_${ab%%=*}.json"
done
timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline_awq.json \
  >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] AWQ decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_awq.log | head -8

timeout "${T_MOE:-100}" python3 benchmarks/hybrid_e2e.py --out /tmp/v/hybrid_e2e.json >/tmp/v/hybrid_e2e.log 2>&1
echo "[${SECONDS}s] hybrid e2e rc=$?"
python3 - /tmp/v/hybrid_e2e.json <<'EOF' || tail -8 /tmp/v/hybrid_e2e.log
import json, sys
d = json.load(open(sys.argv[1]))
print({k: v for k, v in d.items() if not isinstance(v, (list, dict))})
for k in d.get("graph_forward_top_kernels", [])[:16]:
    print(f"{k['us_per_call']:8.1f} us x{k['count_per_call']:5.1f}  {k['kernel'][:90]}")
EOF

# Everything else in one JSON file (at most 8 files come back).
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
