#!/usr/bin/env bash
# Session 19, run 5 (H200): does the driver's per-kernel L1 / shared-memory split cost the decode step its PDL overlap?
# Library = main + REVOLTA_SMEM_CARVEOUT (every kernel revolta::launch starts gets that preferred carveout, so
# consecutive kernels ask for the same split). Llama-3.1-8B AWQ and fp16 batch 1, interleaved, and AWQ timelines.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs/co && xz -dc .devcarry/carveout.so.xz > /tmp/libs/co/librevolta_native.so
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/co/librevolta_native.so
device_init
e2e() {  # e2e LABEL CARVEOUT CONFIG
  REVOLTA_SMEM_CARVEOUT=$2 timeout 60 python3 benchmarks/gpu_e2e.py --config "$3" --decode-only \
    --concurrency 1 --prefill-len 1024 --out "/tmp/v/e2e_$1.json" >"/tmp/v/e2e_$1.log" 2>&1
  echo "[${SECONDS}s] $1 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/e2e_$1.json" | tr '\n' ' ')"
}
for i in 1 2; do
  e2e "awq_default_$i" "" benchmarks/configs/llama-3.1-8b-awq
  e2e "awq_co100_$i" 100 benchmarks/configs/llama-3.1-8b-awq
  e2e "awq_co50_$i" 50 benchmarks/configs/llama-3.1-8b-awq
done
e2e awq_co0 0 benchmarks/configs/llama-3.1-8b-awq
e2e fp16_default "" benchmarks/configs/llama-3.1-8b
e2e fp16_co100 100 benchmarks/configs/llama-3.1-8b
for co in "" 100; do
  REVOLTA_SMEM_CARVEOUT=$co timeout 60 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
    --reps 3 --out /tmp/v/timeline_awq_co${co:-default}.json >/tmp/v/timeline_co${co:-default}.log 2>&1
  echo "[${SECONDS}s] AWQ timeline carveout ${co:-default} rc=$? $(grep -E 'tok/s' /tmp/v/timeline_co${co:-default}.log | head -1)"
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
