#!/usr/bin/env bash
# Device run of branch hybrid3 (issue 7): hybrid kernel GPU tests (the split fused GDN step forced both ways by
# the tests), the engine's hybrid GPU tests, the hybrid kernel benchmark (fused GDN step split vs whole), and the
# Qwen3.5-35B-A3B batch-1 decode with the new defaults and A/Bs: everything old (REVOLTA_GDN_SPLIT=0
# REVOLTA_HYBRID_PDL=0 REVOLTA_MOE_PREFETCH=0; the split off also turns the conv fold off), and each change off
# alone (REVOLTA_GDN_CONV_FUSED=0 keeps the split kernel but runs the conv1d update kernel before it).
# e2e JSONs under $OUT, the rest (logs, hybrid_bench.json) in $OUT/logs.tgz (8 files come back at most).
# (As run on the H200 for benchmarks/results/hybrid3/, the L2 prefetch was still the default and
# REVOLTA_MOE_PREFETCH=0 its A/B; it is opt-in now, REVOLTA_MOE_PREFETCH=1, since it measured slower.)
# Expects PYTHONPATH and REVOLTA_NATIVE_LIB set by the caller (see the helper brief's run command).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1
K="$ROOT/packages/revolta-kernels" E="$ROOT/packages/revolta-engine"
cd "$ROOT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import revolta_kernels as r, torch; print(r.native_status(), torch.__version__)'
PYTEST=(python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" --tb=short --maxfail=25)
stage() {  # stage NAME SECONDS CMD...: run with a time limit, log to $OUT/logs/NAME.log, show the end
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout "$secs" "$@" >"$OUT/logs/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc in $(( $(date +%s) - t0 )) s"
  grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/logs/$name.log" | grep -v "^  " | tail -12
  return $rc
}
summ() { python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print({k: d.get(k) for k in ("batch1_decode_tok_s", "batch1_fraction_of_roofline", "graph_forward_ms", "lm_head_ms",
                             "host_and_sampling_ms_per_step", "async_scheduling")})
for r in d.get("graph_forward_top_kernels", [])[:16]:
    print(f"  {r.get('us_per_call', 0):8.1f} us  x{r.get('count_per_call', 0):5.0f}  {r.get('kernel', r)[:90]}")
PY
}
e2e() {  # e2e NAME [ENV=VALUE...]
  local name=$1; shift
  env "$@" timeout 45 python3 benchmarks/hybrid_e2e.py --eager-output-len 2 --out "$OUT/$name.json" \
    >"$OUT/logs/$name.log" 2>&1
  echo "== $name ($*) rc=$?"
  [ -f "$OUT/$name.json" ] && summ "$OUT/$name.json"
}
stage kernel_tests 60 "${PYTEST[@]}" "$K/tests/test_hybrid_gpu.py"
REVOLTA_HYBRID_PDL=0 REVOLTA_MOE_PREFETCH=0 stage kernel_tests_old_moe 30 "${PYTEST[@]}" "$K/tests/test_hybrid_gpu.py" \
  -k "moe or conv"
REVOLTA_GDN_SPLIT=0 stage kernel_tests_no_split 20 "${PYTEST[@]}" "$K/tests/test_hybrid_gpu.py" -k "fused_conv"
e2e e2e_new
e2e e2e_old REVOLTA_GDN_SPLIT=0 REVOLTA_HYBRID_PDL=0 REVOLTA_MOE_PREFETCH=0
stage bench 45 python3 benchmarks/hybrid_bench.py --out "$OUT/logs/hybrid_bench.json"; tail -3 "$OUT/logs/bench.log"
stage engine_tests 60 "${PYTEST[@]}" "$E/tests/test_gpu_hybrid.py"
e2e e2e_no_split REVOLTA_GDN_SPLIT=0
e2e e2e_no_convfuse REVOLTA_GDN_CONV_FUSED=0
e2e e2e_no_prefetch REVOLTA_MOE_PREFETCH=0
e2e e2e_no_pdl REVOLTA_HYBRID_PDL=0
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs
exit 0
