#!/usr/bin/env bash
# Session 20, run 4 (H200): a preferred L1 / shared-memory carveout per kernel class (run4/carveout_classes.patch:
# REVOLTA_CARVEOUT_ATTN for the light decode attention, _QKV / _FULL for the split-K-free q/k/v and o kernels,
# _SPLITK for the split-K gate_up / down kernel). Session 19 set one carveout for every kernel; at 100% the attention
# got 0.6 us faster per layer while q/k/v lost 3.5 us. AWQ batch 1, interleaved; a timeline. (The first try
# timed out: the library lacked apply_carveout at global scope, failed to load and the engine ran the reference.)
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs/co && xz -dc .devcarry/co.so.xz > /tmp/libs/co/librevolta_native.so
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/co/librevolta_native.so
device_init
python3 -c "import revolta_kernels as k; print(k.native_status()); assert k.native_available()" || exit 1
AWQ=benchmarks/configs/llama-3.1-8b-awq
for i in 1; do
  e2e "default_$i" $AWQ
  e2e "attn100_$i" $AWQ REVOLTA_CARVEOUT_ATTN=100
  e2e "attn100_full100_$i" $AWQ REVOLTA_CARVEOUT_ATTN=100 REVOLTA_CARVEOUT_FULL=100
  e2e "attn100_splitk100_$i" $AWQ REVOLTA_CARVEOUT_ATTN=100 REVOLTA_CARVEOUT_SPLITK=100
  e2e "default_b$i" $AWQ
  e2e "attn100_b$i" $AWQ REVOLTA_CARVEOUT_ATTN=100
done
for c in attn100:REVOLTA_CARVEOUT_ATTN=100; do
  env ${c#*:} timeout 60 python3 benchmarks/decode_timeline.py --config $AWQ --reps 3 \
    --out /tmp/v/timeline_${c%%:*}.json >/tmp/v/timeline_${c%%:*}.log 2>&1
  echo "[${SECONDS}s] timeline ${c%%:*} rc=$? $(grep -E 'tok/s' /tmp/v/timeline_${c%%:*}.log | head -1)"
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
