#!/usr/bin/env bash
# Ninth session, run 2 (H200): inside the decode step (benchmarks/decode_probe.py on the probe library
# librevolta_probe.so: the GEMVs' and the light attention's block phases), then AWQ batch-1 decode under the
# remaining free choices (flags 6: 16-column split-K-free blocks for the fused-norm qkv too; REVOLTA_FUSED_ROPE=1:
# rotary folded into the attention), the fp16 engine once (same run), and the timeline. Caller sets PYTHONPATH /
# REVOLTA_NATIVE_LIB (the normal library).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
REVOLTA_NATIVE_LIB=$ROOT/librevolta_probe.so timeout 90 python3 benchmarks/decode_probe.py --out /tmp/v/probe.json \
  >/tmp/v/probe.log 2>&1; echo "[${SECONDS}s] probe rc=$?"; cat /tmp/v/probe.log | tail -12
awq_e2e 1 ""
awq_e2e flags6 "0,0,1,-1,-1,-1,0,0,-1,6"
REVOLTA_FUSED_ROPE=1 awq_e2e fusedrope ""
awq_e2e 2 ""
timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --decode-only --concurrency 1 \
  --prefill-len 1024 --out /tmp/v/fp16.json >/tmp/v/fp16.log 2>&1
echo "[${SECONDS}s] fp16 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' /tmp/v/fp16.json | tr '\n' ' ')"
timeout 70 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out /tmp/v/timeline.json \
  >/tmp/v/timeline.log 2>&1; grep -E "tok/s|on the path" /tmp/v/timeline.log | head -8
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
