#!/usr/bin/env bash
# Eighth session, run 4 (H200): Llama-3.1-8B AWQ batch-1 decode under the skinny GEMV's launch overrides again
# (REVOLTA_QUANT_TUNE = warps,rows,waves,variant,defer,prefetch_kb,share,minb,full,flags), now that the M=1
# kernel keeps two steps' loads outstanding: the trade-offs of session 7's sweep may have moved.
set -uo pipefail
mkdir -p /tmp/v "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/run.log") 2>&1
e2e() {  # label REVOLTA_QUANT_TUNE
  env REVOLTA_QUANT_TUNE="$2" timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --prefill-len 1024 --out "/tmp/v/awq_$1.json" >"/tmp/v/awq_$1.log" 2>&1
  echo "[${SECONDS}s] awq $1 ($2) rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$1.json" | tr '\n' ' ')"
}
e2e default_1 ""
e2e share2 "0,0,1,-1,-1,-1,2,0,-1,-1"
e2e balanced "0,0,0,-1,-1,-1,0,0,-1,-1"
e2e waves2 "0,0,2,-1,-1,-1,0,0,-1,-1"
e2e default_2 ""
e2e prefetch4mb "0,0,1,-1,-1,4096,0,0,-1,-1"
e2e warps4 "4,0,1,-1,-1,-1,0,0,-1,-1"
e2e full_none "0,0,1,-1,-1,-1,0,0,0,-1"
e2e default_3 ""
python3 "$(dirname "$0")/merge_results.py" "$OUT/results.json" /tmp/v/*.json
