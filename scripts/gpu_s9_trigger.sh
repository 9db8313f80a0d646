#!/usr/bin/env bash
# Ninth session, run 3 (H200): the light decode attention's PDL trigger after its tile loop instead of right after
# its wait (librevolta_late.so, -DREVOLTA_ATTN_LATE_TRIGGER), so the o projection's weight stream starts later and
# does not queue ahead of the attention's L2 reads; AWQ batch 1 interleaved with the default library, and the
# 16-column qkv (flags 6) once more. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB (the default library).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
DEFAULT_LIB=$REVOLTA_NATIVE_LIB
for round in 1 2; do
  awq_e2e "default_$round" ""
  REVOLTA_NATIVE_LIB=$ROOT/librevolta_late.so awq_e2e "late_$round" ""
  awq_e2e "flags6_$round" "0,0,1,-1,-1,-1,0,0,-1,6"
done
REVOLTA_NATIVE_LIB=$ROOT/librevolta_late.so timeout 80 $PYTEST packages/revolta-kernels/tests/test_attention_gpu.py packages/revolta-kernels/tests/test_rope_attention_gpu.py \
  >"$OUT/late_tests.log" 2>&1; echo "[${SECONDS}s] late-trigger attention tests rc=$?"; tail -1 "$OUT/late_tests.log"
REVOLTA_NATIVE_LIB=$DEFAULT_LIB
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
