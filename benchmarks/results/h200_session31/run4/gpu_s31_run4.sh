#!/usr/bin/env bash
# Session 31, run 4 (one GPU): moe_combine's PDL trigger at its start (m31e, main's kernels) against after its stores
# (m31f: -DREVOLTA_COMBINE_LATE_TRIGGER, so the next layer's in_proj weight stream does not compete with its loads).
# Qwen3.5-35B-A3B AWQ batch 1, two interleaved rounds, and m31e with the routing and weighted-sum kernels launched
# plainly (REVOLTA_HYBRID_PDL=0); the routing/combine GPU tests with m31f.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m31e m31f
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
CFG=benchmarks/configs/qwen3.5-35b-a3b-awq
for r in 1 2; do
  hybrid_run "early$r" "$CFG" "$(lib m31e)"
  hybrid_run "late$r" "$CFG" "$(lib m31f)"
done
hybrid_run nopdl "$CFG" "$(lib m31e)" REVOLTA_HYBRID_PDL=0
REVOLTA_NATIVE_LIB=/tmp/libs/m31f/librevolta_native.so gpu_tests routing 60 \
  packages/revolta-kernels/tests/test_moe_routing_gpu.py
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
