#!/usr/bin/env bash
# Session 38, run 2 (one GPU): where the decode attention's ~11 us per layer goes at 1024-1280 keys (H100 run 1's
# timeline), and whether its launch plan is still right at these contexts. Libraries: m47 = main (55b6896), p48 =
# main built with -DREVOLTA_GEMV_PROBE (block start / wait / staged / loop / exit timestamps).
# 1. decode_probe.py on p48: Llama-3.1-8B AWQ batch 1 at a 1024-token prompt, int8 and fp16 activations.
# 2. AWQ batch 1 (int8 activations) under forced split plans and attention variants (split_e2e.py), main's library.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m47 p48
R=benchmarks/results/h200_session38/run2
for act in int8 none; do
  env $(lib p48) REVOLTA_ACTIVATION_QUANT=$act timeout 100 python3 benchmarks/decode_probe.py \
    --prompt-len 1024 --out /tmp/v/probe_$act.json > /tmp/v/probe_$act.log 2>&1
  echo "[${SECONDS}s] probe $act rc=$?"; grep -vE "^\s*$|Processed|WARNING|warn" /tmp/v/probe_$act.log | tail -22
done
export $(lib m47)
sweep() {  # LABEL [NAME=VALUE...]
  local label="$1"; shift
  env REVOLTA_ACTIVATION_QUANT=int8 "$@" timeout 60 python3 $R/split_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --prefill-len 1024 --out /tmp/v/sweep_$label.json > /tmp/v/sweep_$label.log 2>&1
  echo "[${SECONDS}s] $label rc=$? $(grep -hoE '"batch1_decode_tok_s": [0-9.]+' /tmp/v/sweep_$label.json)"
}
for round in 1 2; do
  sweep default_$round
  sweep narrow_$round REVOLTA_DECODE_LIGHT_WIDE=0
  sweep s6_$round SPLITS=6
  sweep s12_$round SPLITS=12
  sweep s16narrow_$round SPLITS=16 REVOLTA_DECODE_LIGHT_WIDE=0
  sweep s16wide_$round SPLITS=16 REVOLTA_DECODE_LIGHT_WIDE=1
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
