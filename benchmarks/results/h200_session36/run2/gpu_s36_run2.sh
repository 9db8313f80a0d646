#!/usr/bin/env bash
# Session 36, run 2 (one GPU). Library m44 = main with the sorted GEMM's tile chosen per call (short up to 48 rows per
# expert; run 1) and moe_combine's T <= 65535 check. The engine's sorted path now sorts with torch.sort + searchsorted
# (offsets) and puts the rows back with index_copy_ + moe_combine (fp32 sum in a fixed order): six fewer small
# kernels per MoE layer than session 35's argsort + index_add_ counts + cumsum + weighted index_add_ (kept as
# run2/quant_moe_before.py for the A/B).
# 1. GPU tests: the sorted GEMM (wide / short / auto), moe_combine, the engine's quantized hybrid tests.
# 2. quant_moe_sorted_bench.py --sorted-only: before / after, twice; then the full bench (grouped against sorted) after,
#    for the decode threshold SORTED_MIN_ROWS_PER_EXPERT (4 now; 2 if the sorted path wins at 2 rows per expert).
# 3. Qwen3.5-35B-A3B AWQ: 128 concurrent before / after; 64 concurrent with the threshold at 4 / 2; TTFT at a
#    1024-token prompt before / after.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m44
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export $(lib m44)
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
NEW_PATH="$PYTHONPATH"
rm -rf /tmp/before && cp -r packages /tmp/before
cp benchmarks/results/h200_session36/run2/quant_moe_before.py /tmp/before/revolta-engine/src/revolta_engine/layers/quant_moe.py
OLD_PATH="/tmp/site:$(ls -d /tmp/before/*/src | tr '\n' ':')"
gpu_tests kernels 200 $K/test_quant_moe_gemm_gpu.py $K/test_quant_moe_combine_gpu.py $K/test_moe_routing_gpu.py
gpu_tests engine_quant_hybrid 200 $E/test_gpu_quant_hybrid.py
for i in 1 2; do
  for v in before after; do
    if [ $v = before ]; then P="$OLD_PATH"; else P="$NEW_PATH"; fi
    PYTHONPATH="$P" timeout 60 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only --out /tmp/v/sorted_${v}_$i.json \
      > /tmp/v/sorted_${v}_$i.log 2>&1
    echo "[${SECONDS}s] sorted bench $v rc=$?"; grep -E "T= *(1|8|32|64|256|1024) " /tmp/v/sorted_${v}_$i.log | tr -s ' '
  done
done
timeout 90 python3 benchmarks/quant_moe_sorted_bench.py --out /tmp/v/full_after.json > /tmp/v/full_after.log 2>&1
echo "[${SECONDS}s] full bench after rc=$?"; grep grouped /tmp/v/full_after.log | tr -s ' '
M=benchmarks/configs/qwen3.5-35b-a3b-awq
conc() {  # conc LABEL N PYTHONPATH [ENV...]
  local label="$1" n="$2" p="$3"; shift 3
  env PYTHONPATH="$p" "$@" timeout 120 python3 benchmarks/gpu_e2e.py --config $M --concurrency $n \
    --input-len 64 --output-len 192 --prefill-len 1024 --out /tmp/v/conc_$label.json > /tmp/v/conc_$label.log 2>&1
  echo "[${SECONDS}s] conc $label rc=$? $(grep -hoE '"(concurrent[0-9]+_output_tok_s|prefill1024_tok_s)": [0-9.]+' /tmp/v/conc_$label.json | tr '\n' ' ')"
}
conc before128 128 "$OLD_PATH"
conc after128 128 "$NEW_PATH"
conc after64_min4 64 "$NEW_PATH" REVOLTA_QUANT_MOE_SORTED_MIN_ROWS=4
conc after64_min2 64 "$NEW_PATH" REVOLTA_QUANT_MOE_SORTED_MIN_ROWS=2
export HYBRID_PROMPT_LEN=1024
hybrid_run before $M PYTHONPATH="$OLD_PATH"
hybrid_run after $M PYTHONPATH="$NEW_PATH"
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
