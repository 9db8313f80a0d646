#!/usr/bin/env bash
# Seventh session, run 2 (H200): Llama-3.1-8B AWQ batch-1 decode under the skinny GEMV's launch overrides
# (REVOLTA_QUANT_TUNE = warps,rows,waves,variant,defer,prefetch_kb,share,minb,full,flags), the default first,
# in the middle and last; then where gemv_flags_ab's illegal address (session 6) comes from: the two-setting
# chain again, with CUDA_LAUNCH_BLOCKING, with the same setting twice, and without PDL.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv,noheader
e2e() { awq_e2e "$@"; }
e2e default_1 ""
e2e share2 "0,0,1,-1,-1,-1,2,0,-1,-1"
e2e balanced "0,0,0,-1,-1,-1,0,0,-1,-1"
e2e waves2 "0,0,2,-1,-1,-1,0,0,-1,-1"
e2e default_2 ""
e2e rows4 "0,4,1,-1,-1,-1,0,0,-1,-1"
e2e warps4 "4,0,1,-1,-1,-1,0,0,-1,-1"
e2e minb4 "0,4,1,-1,-1,-1,0,4,-1,-1"
e2e full_all "0,0,1,-1,-1,-1,0,0,1,-1"
e2e early_trigger "0,0,1,-1,-1,-1,0,0,-1,11"
e2e default_3 ""

ab() {  # label env... -- args
  local label="$1"; shift
  timeout 90 env "$@" python3 benchmarks/gemv_flags_ab.py --rounds 1 --chains 4096x4096 ${FLAGS_ARGS} >"/tmp/v/flags_$label.log" 2>&1
  echo "[${SECONDS}s] flags_ab $label rc=$?"; grep -vE "^\s*$" "/tmp/v/flags_$label.log" | tail -4
}
FLAGS_ARGS="--flags 0,10" ab two_settings PYTHONUNBUFFERED=1
FLAGS_ARGS="--flags 0,10" ab blocking CUDA_LAUNCH_BLOCKING=1
FLAGS_ARGS="--flags 10,10" ab same_twice PYTHONUNBUFFERED=1
FLAGS_ARGS="--flags 0,10 --pdl 0" ab no_pdl PYTHONUNBUFFERED=1
timeout 120 python3 benchmarks/gemv_flags_ab.py --rounds 1 --flags 0,10 >/tmp/v/flags_all.log 2>&1
echo "[${SECONDS}s] flags_ab all chains rc=$?"; grep -vE "^\s*$" /tmp/v/flags_all.log | tail -6

python3 "$(dirname "$0")/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
