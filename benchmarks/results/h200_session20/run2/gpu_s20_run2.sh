#!/usr/bin/env bash
# Session 20, run 2 (H200): act-order gate/up (split-K gathering kernel, act 2) gathers from shared-memory copies of h
# and the norm weight (kGemvFlagGatherShared) instead of one L2 sector per element. Libraries: base = run 1's
# (.devcarry/s20.so.xz), shared = this commit's (.devcarry/s20b.so.xz). GPU tests with the new library; act-order
# batch 1 interleaved base / shared; AWQ and plain GPTQ (no gather, unchanged) once each; per-layer timelines.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
for l in s20 s20b; do mkdir -p /tmp/libs/$l && xz -dc .devcarry/$l.so.xz > /tmp/libs/$l/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/s20b/librevolta_native.so
device_init
gpu_tests order 300 packages/revolta-kernels/tests/test_quant_order_gpu.py
gpu_tests quant 400 packages/revolta-kernels/tests/test_quant_gpu.py packages/revolta-kernels/tests/test_quant_norm_gpu.py
gpu_tests engine 400 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
gptq_config /tmp/v/gptq_true True
gptq_config /tmp/v/gptq_false False
for i in 1 2 3; do
  e2e "actorder_base_$i" /tmp/v/gptq_true REVOLTA_NATIVE_LIB=/tmp/libs/s20/librevolta_native.so
  e2e "actorder_shared_$i" /tmp/v/gptq_true
done
e2e awq_shared benchmarks/configs/llama-3.1-8b-awq
e2e gptq_shared /tmp/v/gptq_false
for l in s20 s20b; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$l/librevolta_native.so timeout 60 python3 benchmarks/decode_timeline.py \
    --config /tmp/v/gptq_true --reps 3 --out /tmp/v/timeline_actorder_$l.json >/tmp/v/timeline_actorder_$l.log 2>&1
  echo "[${SECONDS}s] actorder timeline $l rc=$? $(grep -E 'tok/s' /tmp/v/timeline_actorder_$l.log | head -1)"
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cp "$OUT"/order.log "$OUT"/quant.log "$OUT"/engine.log /tmp/v/ 2>/dev/null
rm -f "$OUT"/order.log "$OUT"/quant.log "$OUT"/engine.log
pack_logs
echo "[${SECONDS}s] done"
