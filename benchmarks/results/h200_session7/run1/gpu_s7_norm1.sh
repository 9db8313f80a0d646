#!/usr/bin/env bash
# Seventh session, run 1 (H200): the split-K GEMV's one-pass norm staging (gemv flag 16, on by default in this
# build) against the previous default (flags 10, through REVOLTA_QUANT_TUNE), and the fused rope + attention
# kernel (REVOLTA_FUSED_ROPE=1) on top, in interleaved rounds of Llama-3.1-8B AWQ batch-1 decode; the quantized
# GEMV GPU tests first; then the two-setting gemv_flags_ab chain under compute-sanitizer (the illegal address
# seen in session 6). Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
mkdir -p /tmp/v "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv,noheader
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu"
OLD="0,0,1,-1,-1,-1,0,0,-1,10"  # REVOLTA_QUANT_TUNE with the session-6 default flags (2 | 8)

timeout 170 $PYTEST packages/revolta-kernels/tests/test_quant_norm_gpu.py packages/revolta-kernels/tests/test_quant_gpu.py \
  packages/revolta-engine/tests/test_linear_quant_norm.py packages/revolta-engine/tests/test_gpu_fused_norm.py \
  >"$OUT/tests.log" 2>&1
echo "[${SECONDS}s] quant GPU tests rc=$?"; tail -1 "$OUT/tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10

e2e() {  # label env...
  local label="$1"; shift
  env "$@" timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only \
    --concurrency 1 --prefill-len 1024 --out "/tmp/v/awq_$label.json" >"/tmp/v/awq_$label.log" 2>&1
  echo "[${SECONDS}s] awq $label rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$label.json" | tr '\n' ' ')"
}
for round in 1 2; do
  e2e "old_$round" REVOLTA_QUANT_TUNE=$OLD
  e2e "norm1_$round" REVOLTA_QUANT_TUNE=
  e2e "norm1_rope_$round" REVOLTA_FUSED_ROPE=1
done
timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --decode-only --concurrency 1 \
  --prefill-len 1024 --out /tmp/v/fp16.json >/tmp/v/fp16.log 2>&1
echo "[${SECONDS}s] fp16 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' /tmp/v/fp16.json | tr '\n' ' ')"

timeout 70 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline_norm1.json \
  >/tmp/v/timeline.log 2>&1
echo "[${SECONDS}s] timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline.log | head -8

timeout 60 python3 benchmarks/gemv_bench.py --sections awq --out /tmp/v/gemv_bench.json >/tmp/v/gemv_bench.log 2>&1
echo "[${SECONDS}s] gemv_bench rc=$?"; grep -vE "^\s*$" /tmp/v/gemv_bench.log | tail -12

SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
echo "sanitizer: ${SAN:-none}"
if [ -n "$SAN" ]; then
  timeout 150 "$SAN" --print-limit 5 python3 benchmarks/gemv_flags_ab.py --flags 0,10 --rounds 1 >/tmp/v/flags_ab_san.log 2>&1
  echo "[${SECONDS}s] flags_ab under sanitizer rc=$?"; grep -vE "^\s*$" /tmp/v/flags_ab_san.log | head -40
fi

python3 - "$OUT/results.json" /tmp/v/*.json <<'EOF'
import json, pathlib, sys
res = {}
for p in sys.argv[2:]:
    try:
        res[pathlib.Path(p).stem] = json.loads(pathlib.Path(p).read_text())
    except Exception as e:
        res[pathlib.Path(p).stem] = {"error": str(e)}
pathlib.Path(sys.argv[1]).write_text(json.dumps(res, indent=1))
EOF
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
