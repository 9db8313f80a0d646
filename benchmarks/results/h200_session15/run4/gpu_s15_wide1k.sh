#!/usr/bin/env bash
# Fifteenth session, run 4 (H200): main's library; AWQ Llama-3.1-8B batch 1 with a 1024-token prompt in a
# 2048-token model (the graphs' 2048-key table), the default light kernel choice against the 256-thread variant
# forced, interleaved. Isolates run 3's wide rule from its merge change.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
ab() {  # LABEL ENV=VALUE
  env "$2" timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --input-len 1024 --prefill-len 1984 --out "/tmp/v/awq_$1.json" >"/tmp/v/awq_$1.log" 2>&1
  echo "[${SECONDS}s] awq $1 ($2) rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$1.json" | tr '\n' ' ')"
}
ab def1 X=1; ab wide1 REVOLTA_DECODE_LIGHT_WIDE=1; ab def2 X=1; ab wide2 REVOLTA_DECODE_LIGHT_WIDE=1
