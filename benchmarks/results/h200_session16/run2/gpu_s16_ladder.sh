#!/usr/bin/env bash
# Sixteenth session, run 2 (H200): the graphs' width ladder as committed (x2, rungs within 1.25x of the maximum
# left out) against the old x4 ladder, interleaved: AWQ Llama-3.1-8B batch 1 at issue 6's setting (512-token prompts,
# 1088-token model: old [64, 68] blocks, new [68]) and at 1100-token prompts in a 4160-token model; the engine GPU
# tests; fp16 Llama-3.1-8B (batch 1, 64 concurrent: graph capture time and memory, 8K prefill) and AWQ batch 1
# against it in one run. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init

# ab LABEL LADDER ARGS...: gpu_e2e.py ARGS with the committed ladder (new) or the x4 ladder of sessions 4-15 (old).
ab() {
  local label="$1" ladder="$2"
  shift 2
  timeout 150 python3 - "$ladder" --out "/tmp/v/ab_$label.json" "$@" >"/tmp/v/ab_$label.log" 2>&1 <<'EOF'
import runpy, sys
import revolta_engine.worker.cuda_graph as cg

def old_ladder(max_blocks: int, smallest: int = 64, factor: int = 4) -> list[int]:
    widths, w = [], smallest
    while w < max_blocks:
        widths.append(w)
        w *= factor
    return widths + [max_blocks]

if sys.argv.pop(1) == "old":
    cg.context_buckets = old_ladder
sys.argv[0] = "benchmarks/gpu_e2e.py"
runpy.run_path("benchmarks/gpu_e2e.py", run_name="__main__")
EOF
  echo "[${SECONDS}s] $label rc=$? $(grep -hoE '"(batch1_decode_tok_s|batch1_fraction_of_roofline|batch1_speedup_over_baseline|concurrent64_output_tok_s)": [0-9.]+' "/tmp/v/ab_$label.json" | tr '\n' ' ')"
  grep -hoE 'Captured CUDA graphs[^"]*' "/tmp/v/ab_$label.json" 2>/dev/null | head -1
}
AWQ="--config benchmarks/configs/llama-3.1-8b-awq --decode-only --concurrency 1"
for i in 1 2; do
  ab "bar_new_$i" new $AWQ --prefill-len 1024
  ab "bar_old_$i" old $AWQ --prefill-len 1024
done
ab "1100_new" new $AWQ --input-len 1100 --prefill-len 4096
ab "1100_old" old $AWQ --input-len 1100 --prefill-len 4096
gpu_tests engine_gpu_tests 170 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
ab fp16_new new --config benchmarks/configs/llama-3.1-8b
ab awq_vs_fp16_new new $AWQ --prefill-len 1024 --baseline /tmp/v/ab_fp16_new.json
ab fp16_old old --config benchmarks/configs/llama-3.1-8b
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
