#!/usr/bin/env bash
# Session 12, run 3: the one-launch MLP's register sets (REVOLTA_MLP_SETS 1 / 2) and reducer width
# (REVOLTA_MLP_REDUCE_COLS 32 / 128): GPU tests of the new variants, the Llama-8B MLP chain for each, AWQ batch 1
# for each and for the two kernels.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
REVOLTA_MLP_SETS=2 gpu_tests mlp_tests_sets2 200 packages/revolta-kernels/tests/test_quant_mlp_gpu.py
REVOLTA_MLP_REDUCE_COLS=128 gpu_tests mlp_tests_cols128 200 packages/revolta-kernels/tests/test_quant_mlp_gpu.py
for sets in 1 2; do
  for cols in 32 128; do
    REVOLTA_MLP_SETS=$sets REVOLTA_MLP_REDUCE_COLS=$cols timeout 60 python3 benchmarks/quant_mlp_bench.py --only Llama-3.1 \
      --out "$OUT/mlp_bench_s${sets}_c$cols.json" 2>&1 | tail -1 | sed "s/^/sets $sets cols $cols: /"
  done
done
e2e() {  # LABEL ENV...
  local label="$1"; shift
  env "$@" timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --prefill-len 1024 --out "$OUT/awq_$label.json" >"/tmp/v/awq_$label.log" 2>&1
  echo "[${SECONDS}s] awq $label rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "$OUT/awq_$label.json" | tr '\n' ' ')"
}
e2e two REVOLTA_FUSED_MLP=0
for sets in 1 2; do
  for cols in 32 128; do
    e2e "s${sets}_c$cols" REVOLTA_FUSED_MLP=1 REVOLTA_MLP_SETS=$sets REVOLTA_MLP_REDUCE_COLS=$cols
  done
done
# a Llama-3.2-1B-shaped AWQ model (hidden 2048, intermediate 8192: 128 slices, fewer than the H200's 132 SMs)
for round in 1 2; do
  for on in 1 0; do
    env REVOLTA_FUSED_MLP=$on timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.2-1b-awq \
      --decode-only --concurrency 1 --prefill-len 1024 --out "$OUT/awq1b_mlp${on}_r$round.json" >"/tmp/v/awq1b.log" 2>&1
    echo "[${SECONDS}s] 1B awq fused_mlp=$on round $round rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "$OUT/awq1b_mlp${on}_r$round.json" | tr '\n' ' ')"
  done
done
tail -3 /tmp/v/awq1b.log
