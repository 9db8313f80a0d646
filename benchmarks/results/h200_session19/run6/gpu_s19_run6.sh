#!/usr/bin/env bash
# Session 19, run 6 (H200): run 5's library again, with moderate carveouts (15-40% of the 228 KB: 32-100 KB of shared memory, L1 keeps 156-224 KB), to see whether the attention's gain from co-residing with the q/k/v blocks comes without the L1 loss.
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
  for co in "" 15 22 30 40; do e2e "awq_co${co:-default}_$i" "$co" benchmarks/configs/llama-3.1-8b-awq; done
done
for co in 22 30; do
  REVOLTA_SMEM_CARVEOUT=$co timeout 60 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
    --reps 3 --out /tmp/v/timeline_awq_co$co.json >/tmp/v/timeline_co$co.log 2>&1
  echo "[${SECONDS}s] AWQ timeline carveout $co rc=$? $(grep -E 'tok/s' /tmp/v/timeline_co$co.log | head -1)"
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
