#!/usr/bin/env bash
# Eighth session, run 7 (H200): Llama-3.1-8B AWQ batch-1 decode with the decode attention's context splits forced
# (native_attention.SPLIT_OVERRIDE: even splits of whole 64-key units) against the occupancy model's plan, which
# gives every split one 64-key tile at these contexts (512-767 keys). Fewer splits mean more tiles per block but a
# cheaper merge. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
split_e2e() {  # label splits ("" = the plan)
  timeout 60 python3 - "$2" --config benchmarks/configs/llama-3.1-8b-awq --decode-only --concurrency 1 --prefill-len 1024 \
    --out "/tmp/v/awq_$1.json" >"/tmp/v/awq_$1.log" 2>&1 <<'PY'
import runpy
import sys

import revolta_kernels.native_attention as attention

if sys.argv[1]:
    attention.SPLIT_OVERRIDE = int(sys.argv[1])
sys.argv = ["gpu_e2e.py", *sys.argv[2:]]
runpy.run_path("benchmarks/gpu_e2e.py", run_name="__main__")
PY
  echo "[${SECONDS}s] awq $1 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$1.json" | tr '\n' ' ')"
}
split_e2e plan_1 ""
split_e2e splits4 4
split_e2e splits6 6
split_e2e splits8 8
split_e2e plan_2 ""
split_e2e splits16 16
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
