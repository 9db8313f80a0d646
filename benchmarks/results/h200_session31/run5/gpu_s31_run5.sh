#!/usr/bin/env bash
# Session 31, run 5 (one GPU): the routing and weighted-sum kernels launched with PDL (m31e) against plain launches
# (m31g; run 4's REVOLTA_HYBRID_PDL=0 measured 396.5 tok/s against 391.0 / 388.7, but that switch also turns off the
# conv1d update's PDL). Qwen3.5-35B-A3B AWQ batch 1, two interleaved rounds; the routing/combine GPU tests with m31g.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m31e m31g
CFG=benchmarks/configs/qwen3.5-35b-a3b-awq
for r in 1 2; do
  hybrid_run "pdl$r" "$CFG" "$(lib m31e)"
  hybrid_run "plain$r" "$CFG" "$(lib m31g)"
done
REVOLTA_NATIVE_LIB=/tmp/libs/m31g/librevolta_native.so gpu_tests routing 60 \
  packages/revolta-kernels/tests/test_moe_routing_gpu.py
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
