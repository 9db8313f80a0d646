#!/usr/bin/env bash
# Sixteenth session (H200): main's library as committed (session 15's wide-variant rule had not run on the GPU) and
# the x2 ladder of graph context widths. quant_bench (issue 6's M = 1 and M = 4096 bars); two interleaved A/Bs of
# AWQ Llama-3.1-8B batch 1: the wide light-attention variant at 1024-token prompts in a 2048-token model (default
# against REVOLTA_DECODE_LIGHT_WIDE=0), and 1100-token prompts in a 4160-token model with the graphs' width ladder
# x2 (default) against x4 (the old one); then gpu_verify_final.sh (every kernel and engine GPU test, fp16 and AWQ
# batch 1 in one run, the decode timeline, the hybrid MoE model). Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p /tmp/v "$OUT"
cd "$ROOT"
timeout 150 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >"$OUT/quant_bench.log" 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; grep -vE "^\s*$" "$OUT/quant_bench.log" | tail -8

# ab LABEL FACTOR ENV ARGS...: AWQ batch-1 decode with the graph width ladder xFACTOR, under ENV ("" or NAME=V).
ab() {
  local label="$1" factor="$2" envs="$3"
  shift 3
  env $envs timeout 90 python3 - "$factor" --config benchmarks/configs/llama-3.1-8b-awq --decode-only --concurrency 1 \
    --out "/tmp/v/ab_$label.json" "$@" >"/tmp/v/ab_$label.log" 2>&1 <<'EOF'
import functools, runpy, sys
import revolta_engine.worker.cuda_graph as cg
cg.context_buckets = functools.partial(cg.context_buckets, factor=int(sys.argv.pop(1)))
sys.argv[0] = "benchmarks/gpu_e2e.py"
runpy.run_path("benchmarks/gpu_e2e.py", run_name="__main__")
EOF
  echo "[${SECONDS}s] $label rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/ab_$label.json" | tr '\n' ' ')"
  grep -hoE 'Captured CUDA graphs[^"]*' "/tmp/v/ab_$label.log" "/tmp/v/ab_$label.json" 2>/dev/null | head -1
}
for i in 1 2; do
  ab "wide1k_default_$i" 2 "" --input-len 1024 --prefill-len 1984
  ab "wide1k_off_$i" 2 "REVOLTA_DECODE_LIGHT_WIDE=0" --input-len 1024 --prefill-len 1984
done
for i in 1 2; do
  ab "ladder2_1100_$i" 2 "" --input-len 1100 --prefill-len 4096
  ab "ladder4_1100_$i" 4 "" --input-len 1100 --prefill-len 4096
done
T_KTEST=200 T_ETEST=170 T_KBENCH=1 T_GEMV=1 T_MOE=100 bash "$ROOT/scripts/gpu_verify_final.sh"
