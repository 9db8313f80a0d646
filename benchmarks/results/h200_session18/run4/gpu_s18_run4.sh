#!/usr/bin/env bash
# Session 18, run 4 (H200): does the act-order code cost the plain decode path anything? AWQ Llama-3.1-8B batch 1
# with this session's library against the library before it (HEAD~1's kernels with stop 27's attention rule, built
# the same way, .devcarry/orig/), interleaved on one machine.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
for i in 1 2 3; do
  for lib in new orig; do
    so=$ROOT/.devcarry/librevolta_native.so; pp=$PYTHONPATH
    [ $lib = orig ] && so=$ROOT/.devcarry/orig/librevolta_native.so && pp=$ROOT/.devcarry/orig/src/packages/revolta-kernels/src:$ROOT/.devcarry/orig/src/packages/revolta-engine/src:$PYTHONPATH
    PYTHONPATH=$pp REVOLTA_NATIVE_LIB=$so timeout 90 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
      --decode-only --concurrency 1 --prefill-len 1024 --out "/tmp/v/awq_${lib}_$i.json" >"/tmp/v/awq_${lib}_$i.log" 2>&1
    echo "[${SECONDS}s] awq $lib $i rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_${lib}_$i.json" | tr '\n' ' ')"
  done
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
