#!/usr/bin/env bash
# Session 23, run 2 (H200): the decode attention prefetching the tail of the same layer's gate/up weights into L2
# before its PDL wait (REVOLTA_L2_PREFETCH_MB, an experiment hook in the Llama decoder layer; library s23b).
# Llama-8B AWQ batch 1 interleaved over prefetch sizes, both activation paths; the per-kernel timeline at 0 / 16 MB;
# the attention GPU tests and the engine GPU tests (with a prefetch set).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs s23b
export REVOLTA_NATIVE_LIB=/tmp/libs/s23b/librevolta_native.so
T=packages/revolta-kernels/tests
AWQ=benchmarks/configs/llama-3.1-8b-awq
for i in 1 2; do
  for mb in 0 8 16 32; do e2e "awq_pf${mb}_$i" $AWQ REVOLTA_L2_PREFETCH_MB=$mb; done
  for mb in 0 16 32; do e2e "awq_int8_pf${mb}_$i" $AWQ REVOLTA_L2_PREFETCH_MB=$mb REVOLTA_ACTIVATION_QUANT=int8; done
done
for mb in 0 16; do
  REVOLTA_L2_PREFETCH_MB=$mb REVOLTA_ACTIVATION_QUANT=int8 timeout 120 python3 benchmarks/decode_timeline.py \
    --config $AWQ --prompt-len 1024 --reps 3 --out /tmp/v/timeline_pf$mb.json > /tmp/v/timeline_pf$mb.log 2>&1
  echo "[${SECONDS}s] timeline pf$mb rc=$?"; tail -12 /tmp/v/timeline_pf$mb.log
done
gpu_tests attn 200 $T/test_attention_gpu.py $T/test_rope_attention_gpu.py
REVOLTA_L2_PREFETCH_MB=16 gpu_tests engine 150 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
