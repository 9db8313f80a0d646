#!/usr/bin/env bash
# Ninth session, run 6 (H200): the register bound of the M = 1 4-row-step GEMV (group size 32) back at three blocks
# per SM: the quantized GPU tests and AWQ batch 1 once. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
quant_tests 120
awq_e2e 1 ""
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
