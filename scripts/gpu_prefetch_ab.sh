#!/usr/bin/env bash
# Sixth session (H200): the decode weight L2 prefetch (revolta::l2_prefetch, layers/l2_prefetch.py). Its GPU tests,
# then Llama-3.1-8B batch-1 decode (AWQ g128 and fp16) under several REVOLTA_L2_PREFETCH_MB budgets, then the AWQ
# decode timeline with the default budget. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB; AWQ_MB / FP16_MB override
# the budget lists ("default" = unset).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT" /tmp/v
export PYTHONUNBUFFERED=1
cd "$ROOT"
exec > >(tee "$OUT/prefetch_ab.log") 2>&1
python3 -c 'import torch, revolta_kernels as r; p = torch.cuda.get_device_properties(0); print(r.native_status()); print("L2", p.L2_cache_size)'
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu"
timeout 150 $PYTEST packages/revolta-kernels/tests/test_prefetch.py packages/revolta-engine/tests/test_l2_prefetch.py \
  packages/revolta-engine/tests/test_gpu_engine.py packages/revolta-engine/tests/test_gpu_fused_norm.py >"$OUT/prefetch_tests.log" 2>&1
echo "[${SECONDS}s] prefetch GPU tests rc=$?"; grep -E "passed|failed" "$OUT/prefetch_tests.log" | tail -1
grep -E "^(FAILED|ERROR)|Error" "$OUT/prefetch_tests.log" | head -10

run() {  # run LABEL CONFIG MB
  local label="$1" config="$2" mb="$3"
  if [ "$mb" = default ]; then unset REVOLTA_L2_PREFETCH_MB; else export REVOLTA_L2_PREFETCH_MB="$mb"; fi
  timeout 60 python3 benchmarks/gpu_e2e.py --config "$config" --decode-only --concurrency 1 --prefill-len 1024 \
    --out "/tmp/v/ab_${label}_$mb.json" >"/tmp/v/ab_${label}_$mb.log" 2>&1
  echo "[${SECONDS}s] $label L2 prefetch $mb MB rc=$?"; grep -E '"batch1_(decode|fraction_of_roofline)"' "/tmp/v/ab_${label}_$mb.json" \
    || tail -4 "/tmp/v/ab_${label}_$mb.log"
  unset REVOLTA_L2_PREFETCH_MB
}
for mb in ${AWQ_MB:-0 default 12 20 40 0 default}; do run awq benchmarks/configs/llama-3.1-8b-awq "$mb"; done
for mb in ${FP16_MB:-0 default}; do run fp16 benchmarks/configs/llama-3.1-8b "$mb"; done
timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out "$OUT/timeline_awq.json" \
  >/tmp/v/timeline_awq.log 2>&1
echo "[${SECONDS}s] AWQ decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_awq.log | head -10
REVOLTA_L2_PREFETCH_MB=0 timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
  --out "$OUT/timeline_awq_off.json" >/tmp/v/timeline_awq_off.log 2>&1
echo "[${SECONDS}s] AWQ decode timeline, prefetch off rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_awq_off.log | head -10
python3 - "$OUT/results.json" /tmp/v/*.json <<'PY'
import json, pathlib, sys
res = {}
for p in sys.argv[2:]:
    try:
        res[pathlib.Path(p).stem] = json.loads(pathlib.Path(p).read_text())
    except Exception as e:
        res[pathlib.Path(p).stem] = {"error": str(e)}
pathlib.Path(sys.argv[1]).write_text(json.dumps(res, indent=1))
PY
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
