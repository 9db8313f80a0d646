#!/usr/bin/env bash
# Eighth session, run 8 (H200; run from scripts/, kept here because the change it measures was reverted): the light decode kernel's split merge loads 16 splits' partials at a time instead
# of 4 (one L2 round trip for up to 16 splits): the attention GPU tests, the attention kernel benchmark, and
# Llama-3.1-8B AWQ batch-1 decode twice. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
timeout 120 $PYTEST packages/revolta-kernels/tests/test_attention_gpu.py packages/revolta-kernels/tests/test_rope_attention_gpu.py \
  $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py) >"$OUT/tests.log" 2>&1
echo "[${SECONDS}s] attention + engine GPU tests rc=$?"; tail -1 "$OUT/tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10
timeout 60 python3 benchmarks/kernels_bench.py --no-split-sweep --out /tmp/v/kernels_bench.json >/tmp/v/kernels_bench.log 2>&1
echo "[${SECONDS}s] kernels_bench rc=$?"; grep -E "engine decode b1|light kernel|rope\+cache" /tmp/v/kernels_bench.log | head -8
awq_e2e default_1 ""
awq_e2e default_2 ""
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
