#!/usr/bin/env bash
# Session 38, run 4 (one GPU): the light decode attention's tail and score loop. Libraries: m47 = main (55b6896),
# m48 = the one-shot split merge (every split's partials of a thread's item loaded at once: one L2 round trip, no
# barrier, up to 16 splits), m49 = m48 + the scores' reduce-scatter over a key row's lanes (30 shuffles per 128-key
# tile instead of 128 at d128 / group 4).
# 1. GPU tests of every attention path on m49, then m48 (the merge alone).
# 2. Llama-3.1-8B AWQ batch 1 at a 1024-token prompt, int8 and fp16 activations, m47 / m48 / m49 interleaved, 2 rounds.
# 3. The attention's time on the step's path (decode_timeline.py), m47 / m49.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m47 m48 m49
K=packages/revolta-kernels/tests
E=packages/revolta-engine/tests
export $(lib m49)
gpu_tests attention_m49 200 $K/test_attention_gpu.py $K/test_rope_attention_gpu.py $E/test_gpu_qkv_rope.py
export $(lib m48)
gpu_tests attention_m48 200 $K/test_attention_gpu.py
for round in 1 2; do
  for v in m47 m48 m49; do
    e2e int8_${v}_$round benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8 $(lib $v)
    e2e none_${v}_$round benchmarks/configs/llama-3.1-8b-awq $(lib $v)
  done
done
for v in m47 m49; do
  env $(lib $v) REVOLTA_ACTIVATION_QUANT=int8 timeout 100 python3 benchmarks/decode_timeline.py \
    --config benchmarks/configs/llama-3.1-8b-awq --prompt-len 1024 --reps 3 --out /tmp/v/timeline_$v.json \
    > /tmp/v/timeline_$v.log 2>&1
  echo "[${SECONDS}s] timeline $v rc=$?"; grep -E "tok/s|paged_decode" /tmp/v/timeline_$v.log
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
