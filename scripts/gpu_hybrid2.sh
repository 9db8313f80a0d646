#!/usr/bin/env bash
# Device run of branch hybrid2 (issue 7): hybrid kernel GPU tests (the MoE tests again with the opt-in v2 kernels,
# REVOLTA_MOE_V2=1), the hybrid kernel benchmark, the Qwen3.5-35B-A3B batch-1 decode (async, and as A/Bs the
# synchronous loop and the v2 MoE kernels) and the engine's hybrid GPU tests. Logs and JSON under $OUT.
# (The run saved in benchmarks/results/hybrid2/ had v2 as the default and REVOLTA_MOE_V1=1 as the A/B.)
# Expects PYTHONPATH and REVOLTA_NATIVE_LIB set by the caller (see the helper brief's run command).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
K="$ROOT/packages/revolta-kernels" E="$ROOT/packages/revolta-engine"
cd "$ROOT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import revolta_kernels as r, torch; print(r.native_status(), torch.__version__)'
PYTEST=(python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" --tb=short --maxfail=25)
stage() {  # stage NAME SECONDS CMD...: run with a time limit, log to $OUT/NAME.log, show the end
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc in $(( $(date +%s) - t0 )) s"
  grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/$name.log" | grep -v "^  " | tail -12
  return $rc
}
summ() { python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print({k: d.get(k) for k in ("batch1_decode_tok_s", "batch1_fraction_of_roofline", "graph_forward_ms", "lm_head_ms",
                             "host_and_sampling_ms_per_step", "async_scheduling")})
for r in d.get("graph_forward_top_kernels", [])[:14]:
    print(f"  {r.get('us_per_call', 0):8.1f} us  x{r.get('count_per_call', 0):5.0f}  {r.get('kernel', r)[:90]}")
PY
}
stage kernel_tests 90 "${PYTEST[@]}" "$K/tests/test_hybrid_gpu.py"
REVOLTA_MOE_V2=1 stage kernel_tests_moe_v2 40 "${PYTEST[@]}" "$K/tests/test_hybrid_gpu.py" -k "moe"
stage bench 60 python3 benchmarks/hybrid_bench.py --out "$OUT/hybrid_bench.json"; tail -2 "$OUT/bench.log"
stage e2e 75 python3 benchmarks/hybrid_e2e.py --out "$OUT/hybrid_e2e.json" && summ "$OUT/hybrid_e2e.json"
stage engine_tests 90 "${PYTEST[@]}" "$E/tests/test_gpu_hybrid.py"
stage e2e_sync 60 python3 benchmarks/hybrid_e2e.py --sync --eager-output-len 2 --out "$OUT/e2e_sync.json" && summ "$OUT/e2e_sync.json"
REVOLTA_MOE_V2=1 stage e2e_moe_v2 60 python3 benchmarks/hybrid_e2e.py --eager-output-len 2 --out "$OUT/e2e_moe_v2.json" \
  && summ "$OUT/e2e_moe_v2.json"
exit 0
