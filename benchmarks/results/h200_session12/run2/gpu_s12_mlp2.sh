#!/usr/bin/env bash
# Session 12, run 2: the one-launch MLP after run 1 (32-column output reducers, 8 loads in flight each) with and
# without the L2 prefetch of the step after next (REVOLTA_MLP_PREFETCH): GPU tests of both, the chained MLP
# benchmark of both, AWQ batch 1 for fused (both variants) and unfused, interleaved; a decode timeline.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
MLPT="packages/revolta-kernels/tests/test_quant_mlp_gpu.py packages/revolta-engine/tests/test_gpu_fused_mlp.py"
gpu_tests mlp_tests 200 $MLPT packages/revolta-engine/tests/test_linear_quant_norm.py
REVOLTA_MLP_PREFETCH=1 gpu_tests mlp_tests_pf 200 packages/revolta-kernels/tests/test_quant_mlp_gpu.py
for pf in 0 1; do
  REVOLTA_MLP_PREFETCH=$pf timeout 120 python3 benchmarks/quant_mlp_bench.py --out "$OUT/mlp_bench_pf$pf.json" 2>&1 | tail -4
done
e2e() {  # LABEL ENV...
  local label="$1"; shift
  env "$@" timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --prefill-len 1024 --out "$OUT/awq_$label.json" >"/tmp/v/awq_$label.log" 2>&1
  echo "[${SECONDS}s] awq $label rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "$OUT/awq_$label.json" | tr '\n' ' ')"
}
for round in 1 2; do
  e2e "fused_pf0_r$round" REVOLTA_FUSED_MLP=1 REVOLTA_MLP_PREFETCH=0
  e2e "fused_pf1_r$round" REVOLTA_FUSED_MLP=1 REVOLTA_MLP_PREFETCH=1
  e2e "two_r$round" REVOLTA_FUSED_MLP=0
done
REVOLTA_MLP_PREFETCH=1 timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
  --out "$OUT/timeline_fused.json" >/tmp/v/timeline.log 2>&1
echo "[${SECONDS}s] AWQ decode timeline (fused, pf1) rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline.log | head -10
cp /tmp/v/timeline.log "$OUT/"
