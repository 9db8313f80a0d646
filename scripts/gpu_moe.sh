#!/usr/bin/env bash
# Device run of branch moe (issue 7): MoE v3 kernels + the residual add + RMSNorm fused into the router.
# Stages: the MoE kernel GPU tests (every variant), the MoE chain microbenchmark (every variant, norm fused or
# not, batch 1/2/4/8), Qwen3.5-35B-A3B fp16 batch-1 decode new vs old (REVOLTA_MOE_V3=0 REVOLTA_MOE_ROUTER_NORM=0)
# and each change alone, the engine hybrid GPU tests (stages that would pass the time limit are skipped).
# Expects PYTHONPATH and REVOLTA_NATIVE_LIB set by the caller (see the helper brief's run command).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1
K="$ROOT/packages/revolta-kernels" E="$ROOT/packages/revolta-engine"
LIMIT="${MOE_RUN_LIMIT:-225}"  # seconds: stages that would not finish are skipped
cd "$ROOT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import revolta_kernels as r, torch; print(r.native_status(), torch.__version__)'
PYTEST=(python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" --tb=short --maxfail=25)
stage() {  # stage NAME SECONDS CMD...: run with a time limit, log to $OUT/logs/NAME.log, show the end
  local name=$1 secs=$2; shift 2
  if (( SECONDS + 5 > LIMIT )); then echo "== $name skipped (time)"; return 0; fi
  local t0=$SECONDS
  timeout "$secs" "$@" >"$OUT/logs/$name.log" 2>&1
  local rc=$?
  echo "== [$SECONDS s] $name rc=$rc in $(( SECONDS - t0 )) s"
  grep -E "^(FAILED|ERROR)|passed|failed|Error|moe chain|copy " "$OUT/logs/$name.log" | grep -v "^  " | tail -14
  return $rc
}
summ() { python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print({k: d.get(k) for k in ("batch1_decode_tok_s", "batch1_fraction_of_roofline", "graph_forward_ms", "lm_head_ms",
                             "host_and_sampling_ms_per_step")})
for r in d.get("graph_forward_top_kernels", [])[:12]:
    print(f"  {r.get('us_per_call', 0):8.1f} us  x{r.get('count_per_call', 0):5.0f}  {r.get('kernel', r)[:90]}")
PY
}
e2e() {  # e2e NAME [ENV=VALUE...]
  local name=$1; shift
  if (( SECONDS + 40 > LIMIT )); then echo "== $name skipped (time)"; return 0; fi
  env "$@" timeout 50 python3 benchmarks/hybrid_e2e.py --eager-output-len 2 --out "$OUT/$name.json" \
    >"$OUT/logs/$name.log" 2>&1
  echo "== [$SECONDS s] $name ($*) rc=$?"
  [ -f "$OUT/$name.json" ] && summ "$OUT/$name.json"
}
stage tests_moe 80 "${PYTEST[@]}" "$K/tests/test_hybrid_gpu.py" -k "moe"
stage bench 45 python3 benchmarks/hybrid_bench.py --only moe_block_batch1,moe_chain --out "$OUT/moe_bench.json"
e2e e2e_new
e2e e2e_old REVOLTA_MOE_V3=0 REVOLTA_MOE_ROUTER_NORM=0
e2e e2e_v1_router_norm REVOLTA_MOE_V3=0
e2e e2e_new_down1 REVOLTA_MOE_DOWN=1
stage engine_tests 45 "${PYTEST[@]}" "$E/tests/test_gpu_hybrid.py"
e2e e2e_new_no_router_norm REVOLTA_MOE_ROUTER_NORM=0
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs
exit 0
