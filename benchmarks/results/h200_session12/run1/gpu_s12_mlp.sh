#!/usr/bin/env bash
# Session 12, run 1: the one-launch quantized MLP (csrc/quant_mlp.cuh): its GPU tests, the chained MLP benchmark,
# and Llama-3.1-8B AWQ batch-1 decode with it on and off (REVOLTA_FUSED_MLP), interleaved.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
gpu_tests mlp_tests 240 packages/revolta-kernels/tests/test_quant_mlp_gpu.py packages/revolta-engine/tests/test_gpu_fused_mlp.py \
  packages/revolta-engine/tests/test_linear_quant_norm.py
timeout 120 python3 benchmarks/quant_mlp_bench.py --out "$OUT/mlp_bench.json" 2>&1 | tail -8
for round in 1 2; do
  for on in 1 0; do
    env REVOLTA_FUSED_MLP=$on timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
      --decode-only --concurrency 1 --prefill-len 1024 --out "$OUT/awq_mlp${on}_r$round.json" >"/tmp/v/awq_$on.log" 2>&1
    echo "[${SECONDS}s] awq fused_mlp=$on round $round rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "$OUT/awq_mlp${on}_r$round.json" | tr '\n' ' ')"
  done
done
tail -3 /tmp/v/awq_1.log
