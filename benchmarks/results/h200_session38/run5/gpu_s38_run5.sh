#!/usr/bin/env bash
# Session 38, run 5 (one GPU): the scores' reduce-scatter alone. Run 4 measured the one-shot merge slower in the
# engine (m48: AWQ batch 1 474.8 -> 463.0 tok/s with int8 activations) and the reduce-scatter worth ~1% on top of it
# (m49: 467.9). m50 = m49's source built with -DREVOLTA_MERGE_NO_ONESHOT: main's merges, the new score loop (the
# SASS of the tree with the one-shot merge deleted). m47 = main (55b6896).
# 1. GPU tests of every attention path on m50.  2. AWQ batch 1, int8 / fp16 activations, m47 / m50, 3 rounds; the fp16
# engine (whose attention is the same kernel) once each.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m47 m50
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
export $(lib m50)
gpu_tests attention_m50 200 $K/test_attention_gpu.py $K/test_rope_attention_gpu.py $E/test_gpu_qkv_rope.py
for round in 1 2 3; do
  for v in m47 m50; do
    e2e int8_${v}_$round benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8 $(lib $v)
    e2e none_${v}_$round benchmarks/configs/llama-3.1-8b-awq $(lib $v)
  done
done
e2e fp16_m47 benchmarks/configs/llama-3.1-8b $(lib m47)
e2e fp16_m50 benchmarks/configs/llama-3.1-8b $(lib m50)
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
