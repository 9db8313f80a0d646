#!/usr/bin/env bash
# Tenth session, run 2 (H200): the light decode attention's 256-thread variant (REVOLTA_DECODE_LIGHT_WIDE=1: tiles of
# 128 keys at head_dim 128, so a 128-key split is one tile whose K/V all load before the PDL wait). Its attention
# GPU tests, then Llama-3.1-8B AWQ batch 1 and the decode timeline with it off (default) and on, interleaved.
# Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
REVOLTA_DECODE_LIGHT_WIDE=1 gpu_tests wide_tests 150 packages/revolta-kernels/tests/test_attention_gpu.py \
  packages/revolta-kernels/tests/test_rope_attention_gpu.py
for round in 1 2; do
  awq_e2e "default_$round" ""
  REVOLTA_DECODE_LIGHT_WIDE=1 awq_e2e "wide_$round" ""
done
for v in 0 1; do
  REVOLTA_DECODE_LIGHT_WIDE=$v timeout 90 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
    --out "/tmp/v/timeline_wide$v.json" >"/tmp/v/timeline_wide$v.log" 2>&1
  echo "[${SECONDS}s] timeline wide=$v rc=$?"; grep -iE "attention|rotary|qkv|per layer|tok/s|step" "/tmp/v/timeline_wide$v.log" | head -14
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
