#!/usr/bin/env bash
# Seventh session, run 3 (H200): which chain sequence makes gemv_flags_ab.py hit an illegal address (run 2: the
# 4096x4096 chain alone passes with two settings, after the Llama-8B chain it fails).
set -uo pipefail
mkdir -p /tmp/v "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
ab() {  # label flags chains [env...]
  local label="$1" flags="$2" chains="$3"; shift 3
  timeout 100 env PYTHONUNBUFFERED=1 "$@" python3 benchmarks/gemv_flags_ab.py --rounds 1 --flags "$flags" --chains "$chains" \
    >"/tmp/v/$label.log" 2>&1
  echo "[${SECONDS}s] $label (flags $flags, chains $chains, $*) rc=$?"
  grep -E "ideal|Error|error|File .*revolta|line [0-9]+, in" "/tmp/v/$label.log" | grep -v "^Search\|^CUDA kernel\|^For debug\|^Compile" | tail -8
}
ab blocking_two "0,10" "llama8b_32_layers,4096x4096" CUDA_LAUNCH_BLOCKING=1
ab norm_then_plain "0,10" "4096x6144_norm,4096x4096"
ab reversed "10,0" "llama8b_32_layers,4096x4096"
ab single "10" "llama8b_32_layers,4096x4096"
ab single0 "0" "llama8b_32_layers,4096x4096"
ab two_14336 "0,10" "llama8b_32_layers,4096x14336"
cat /tmp/v/*.log > "$OUT/logs.txt"
