#!/usr/bin/env bash
# Session 27, run 1 (one GPU): where the batch-1 decode attention's ~8 us on the step's path go, and the lean decode
# kernel (csrc/decode_lean.cuh, REVOLTA_DECODE_LEAN=1) against the light one.
# Libraries: m24 = main's kernels; lt = this tree with the light kernel's PDL trigger after its tile loop
# (-DREVOLTA_LIGHT_LATE_TRIGGER; the lean kernel's trigger is unaffected); probe libraries
# (-DREVOLTA_GEMV_PROBE, benchmarks/decode_probe.py): p0 = main's light kernel (point 3 = query in), pqk = point 3
# after the first tile's scores (query and K registers in), plt = the lt tree.
# NOT RUN in session 27: no device was lent. Before running it, build the libraries from the tree that holds the
# lean kernel (m24 = the same tree without flags):
#   scripts/build_variant_lib.sh m24 ""
#   scripts/build_variant_lib.sh lt "-DREVOLTA_LIGHT_LATE_TRIGGER"
#   scripts/build_variant_lib.sh p0 "-DREVOLTA_GEMV_PROBE"
#   scripts/build_variant_lib.sh pqk "-DREVOLTA_GEMV_PROBE -DREVOLTA_ATTN_PROBE_QK"
#   scripts/build_variant_lib.sh plt "-DREVOLTA_GEMV_PROBE -DREVOLTA_LIGHT_LATE_TRIGGER"
# Five libraries are ~51 MB: carry [".devcarry", ".whl"] stays under 64 MiB only with .whl holding the engine's wheels
# alone (leave the openai, anthropic, xgrammar and apache-tvm-ffi wheels out for this run).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m24 lt p0 pqk plt
env $(lib lt) REVOLTA_DECODE_LEAN=1 gpu_tests attention 240 packages/revolta-kernels/tests/test_attention_gpu.py
export REVOLTA_ACTIVATION_QUANT=int8
probe() {  # probe NAME LIB [NAME=VALUE...]
  local name="$1" v="$2"; shift 2
  env $(lib $v) "$@" timeout 90 python3 benchmarks/decode_probe.py --out /tmp/v/probe_$name.json >/tmp/v/probe_$name.log 2>&1
  echo "[${SECONDS}s] probe $name rc=$?"; grep -E "attention|gemv" /tmp/v/probe_$name.log
}
probe p0 p0
probe pqk pqk
probe plt plt
probe plean plt REVOLTA_DECODE_LEAN=1
for r in 1 2; do
  e2e "int8_m24_$r" benchmarks/configs/llama-3.1-8b-awq $(lib m24)
  e2e "int8_late_$r" benchmarks/configs/llama-3.1-8b-awq $(lib lt)
  e2e "int8_lean_$r" benchmarks/configs/llama-3.1-8b-awq $(lib lt) REVOLTA_DECODE_LEAN=1
done
env $(lib m24) timeout 90 python3 benchmarks/kernels_bench.py --engine-only --no-split-sweep --out /tmp/v/kb_light.json \
  >/tmp/v/kb_light.log 2>&1; echo "[${SECONDS}s] kernels_bench light rc=$?"; grep -E "b1 |b8 |light" /tmp/v/kb_light.log | head -12
env $(lib lt) REVOLTA_DECODE_LEAN=1 timeout 90 python3 benchmarks/kernels_bench.py --engine-only --no-split-sweep \
  --out /tmp/v/kb_lean.json >/tmp/v/kb_lean.log 2>&1; echo "[${SECONDS}s] kernels_bench lean rc=$?"
grep -E "b1 |b8 |light" /tmp/v/kb_lean.log | head -12
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
