#!/usr/bin/env bash
# On the GPU machine (helper `dense`): the fused residual add + RMSNorm + fp16 GEMV (revolta::dense_linear_add_rms_norm).
# GPU tests of the op and of the engine dispatch, gemv_bench.py's dense_norm / llama8b_norm sections (fused vs the
# separate fused_add_rms_norm kernel), then Llama-3.1-8B fp16 batch 1 (gpu_e2e.py) and the Qwen3.5-35B-A3B-shaped
# fp16 hybrid at batch 1 (hybrid_e2e.py), each with the fp16 fusion on (REVOLTA_FUSED_NORM_DENSE=1: v1, 4x4, one
# row) and off (the default), then with variant 2 in the GEMV's 8x4 shape (bit-equal to the unfused ops).
# (Device runs 1 and 2 of helper dense ran this script's earlier version, which A/B'd REVOLTA_FUSED_NORM=1/0.)
# Expects REVOLTA_NATIVE_LIB, PYTHONPATH and OUT set. Writes <= 8 files under $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT" /tmp/v
export PYTHONUNBUFFERED=1
cd "$ROOT"
exec > >(tee "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import revolta_kernels as r; print(r.native_status())'
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu"

timeout "${T_KTEST:-80}" $PYTEST packages/revolta-kernels/tests/test_dense_norm_gpu.py packages/revolta-kernels/tests/test_gemv_gpu.py \
  -k "norm or dense" --maxfail=20 >"$OUT/kernel_tests.log" 2>&1
echo "[${SECONDS}s] kernel GPU tests rc=$?"; tail -1 "$OUT/kernel_tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/kernel_tests.log" | head -15

timeout "${T_ETEST:-90}" $PYTEST packages/revolta-engine/tests/test_linear_fused.py packages/revolta-engine/tests/test_gpu_fused_norm.py \
  packages/revolta-engine/tests/test_gpu_engine.py packages/revolta-engine/tests/test_gpu_hybrid.py >"$OUT/engine_tests.log" 2>&1
echo "[${SECONDS}s] engine GPU tests rc=$?"; tail -1 "$OUT/engine_tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/engine_tests.log" | head -15

timeout "${T_GEMV:-75}" python3 benchmarks/gemv_bench.py --sections dense_norm,llama8b_norm --out /tmp/v/gemv_norm.json >/tmp/v/gemv_norm.log 2>&1
echo "[${SECONDS}s] gemv_bench rc=$?"; grep -vE "^\s*$" /tmp/v/gemv_norm.log | tail -12

for fn in 1 0; do
  REVOLTA_FUSED_NORM_DENSE=$fn timeout "${T_E2E:-50}" python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --decode-only \
    --concurrency 1 --prefill-len 1024 --out /tmp/v/llama_fp16_fusednorm$fn.json >/tmp/v/llama_fp16_fusednorm$fn.log 2>&1
  echo "[${SECONDS}s] llama fp16 e2e REVOLTA_FUSED_NORM_DENSE=$fn rc=$?"
  grep -E '"(batch1_decode|batch1_fraction|roofline_tok)' /tmp/v/llama_fp16_fusednorm$fn.json || tail -5 /tmp/v/llama_fp16_fusednorm$fn.log
done

for fn in 1 0; do
  REVOLTA_FUSED_NORM_DENSE=$fn timeout "${T_MOE:-60}" python3 benchmarks/hybrid_e2e.py --out /tmp/v/hybrid_fusednorm$fn.json \
    >/tmp/v/hybrid_fusednorm$fn.log 2>&1
  echo "[${SECONDS}s] hybrid e2e REVOLTA_FUSED_NORM_DENSE=$fn rc=$?"
  python3 - /tmp/v/hybrid_fusednorm$fn.json <<'PY' || tail -8 /tmp/v/hybrid_fusednorm$fn.log
import json, sys
d = json.load(open(sys.argv[1]))
print({k: v for k, v in d.items() if not isinstance(v, (list, dict))})
rows = d.get("graph_forward_top_kernels", [])
for k in [r for i, r in enumerate(rows) if i < 10 or "norm" in r["kernel"] or "gemv" in r["kernel"]]:
    print(f"{k['us_per_call']:8.1f} us x{k['count_per_call']:5.1f}  {k['kernel'][:90]}")
PY
done

# variant 2 (8x4) of the fused kernel end to end, if time is left
if [ "$SECONDS" -lt 170 ]; then
  REVOLTA_FUSED_NORM_DENSE=1 REVOLTA_DENSE_NORM_VARIANT=2,8,4 timeout 30 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --decode-only \
    --concurrency 1 --prefill-len 1024 --out /tmp/v/llama_fp16_fusednorm_v2.json >/tmp/v/llama_fp16_fusednorm_v2.log 2>&1
  echo "[${SECONDS}s] llama fp16 e2e variant 2 rc=$?"
  grep -E '"(batch1_decode|batch1_fraction)' /tmp/v/llama_fp16_fusednorm_v2.json
fi
if [ "$SECONDS" -lt 195 ]; then
  REVOLTA_FUSED_NORM_DENSE=1 REVOLTA_DENSE_NORM_VARIANT=2,8,4 timeout 30 python3 benchmarks/hybrid_e2e.py --out /tmp/v/hybrid_fusednorm_v2.json >/tmp/v/hybrid_fusednorm_v2.log 2>&1
  echo "[${SECONDS}s] hybrid e2e variant 2 rc=$?"
  grep -oE '"(batch1_decode_tok_s|graph_forward_ms)": [0-9.]+' /tmp/v/hybrid_fusednorm_v2.json
fi

python3 "$(dirname "$0")/merge_results.py" "$OUT/results.json" /tmp/v/*.json
for f in /tmp/v/*.log; do echo "=== $f"; cat "$f"; done > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
