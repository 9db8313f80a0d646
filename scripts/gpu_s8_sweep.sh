#!/usr/bin/env bash
# Eighth session, run 4 (H200): Llama-3.1-8B AWQ batch-1 decode under the skinny GEMV's launch overrides again
# (REVOLTA_QUANT_TUNE = warps,rows,waves,variant,defer,prefetch_kb,share,minb,full,flags), now that the M=1
# kernel keeps two steps' loads outstanding: the trade-offs of session 7's sweep may have moved.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
e2e() { awq_e2e "$@"; }
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
