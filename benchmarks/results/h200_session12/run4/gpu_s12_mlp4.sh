#!/usr/bin/env bash
# Session 12, run 4: the one-launch MLP with run 3's stride bug fixed (the phase-A steps that refill with phase B's
# first step used gate_up's row stride) and SETS=2 redefined as two register sets in phase A only: GPU tests of
# both, the Llama-8B MLP chain for both, AWQ batch 1 of Llama-3.1-8B and a Llama-3.2-1B shape, interleaved.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
MLPT="packages/revolta-kernels/tests/test_quant_mlp_gpu.py packages/revolta-engine/tests/test_gpu_fused_mlp.py"
gpu_tests mlp_tests 200 $MLPT
REVOLTA_MLP_SETS=2 gpu_tests mlp_tests_sets2 200 $MLPT
for sets in 1 2; do
  REVOLTA_MLP_SETS=$sets timeout 60 python3 benchmarks/quant_mlp_bench.py --only Llama-3.1 \
    --out "$OUT/mlp_bench_s$sets.json" 2>&1 | tail -1 | sed "s/^/sets $sets: /"
done
e2e() {  # CONFIG LABEL ENV...
  local cfg="$1" label="$2"; shift 2
  env "$@" timeout 60 python3 benchmarks/gpu_e2e.py --config "benchmarks/configs/$cfg" \
    --decode-only --concurrency 1 --prefill-len 1024 --out "$OUT/${cfg}_$label.json" >"/tmp/v/e2e.log" 2>&1
  echo "[${SECONDS}s] $cfg $label rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "$OUT/${cfg}_$label.json" | tr '\n' ' ')"
}
for round in 1 2; do
  e2e llama-3.1-8b-awq "two_r$round" REVOLTA_FUSED_MLP=0
  e2e llama-3.1-8b-awq "s1_r$round" REVOLTA_FUSED_MLP=1 REVOLTA_MLP_SETS=1
  e2e llama-3.1-8b-awq "s2_r$round" REVOLTA_FUSED_MLP=1 REVOLTA_MLP_SETS=2
done
for round in 1 2; do
  e2e llama-3.2-1b-awq "two_r$round" REVOLTA_FUSED_MLP=0
  e2e llama-3.2-1b-awq "s1_r$round" REVOLTA_FUSED_MLP=1 REVOLTA_MLP_SETS=1
  e2e llama-3.2-1b-awq "s2_r$round" REVOLTA_FUSED_MLP=1 REVOLTA_MLP_SETS=2
done
