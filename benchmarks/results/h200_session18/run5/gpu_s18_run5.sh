#!/usr/bin/env bash
# Session 18, run 5 (H200): act-order staging moved into kernels of its own (quant_gemv_gather_kernel and the
# GATHER instantiations of the split-K-free kernel), so the plain kernels compile as before (sm_90 ptxas: the same
# registers and spills for every plain instantiation). Kernel and engine GPU tests; AWQ Llama-3.1-8B batch 1 against
# the library before this session's act-order work (.devcarry/orig, with its own Python), interleaved; GPTQ
# act-order and plain batch 1.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
REVOLTA_NATIVE_LIB=$ROOT/.devcarry/librevolta_native.so gpu_tests kernel_gpu_tests 120 packages/revolta-kernels/tests
REVOLTA_NATIVE_LIB=$ROOT/.devcarry/librevolta_native.so gpu_tests engine_gpu_tests 100 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
for act in false true; do
  mkdir -p "/tmp/v/gptq_$act"
  python3 - "$act" <<'PY'
import json, sys
act = sys.argv[1] == "true"
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False,
                              "desc_act": act, "checkpoint_format": "gptq"}
json.dump(cfg, open(f"/tmp/v/gptq_{sys.argv[1]}/config.json", "w"), indent=2)
PY
done
e2e() {  # e2e LABEL LIB CONFIG
  local so=$ROOT/.devcarry/librevolta_native.so pp=$PYTHONPATH
  if [ "$2" = orig ]; then
    so=$ROOT/.devcarry/orig/librevolta_native.so
    pp=$ROOT/.devcarry/orig/src/packages/revolta-kernels/src:$ROOT/.devcarry/orig/src/packages/revolta-engine/src:$PYTHONPATH
  fi
  PYTHONPATH=$pp REVOLTA_NATIVE_LIB=$so timeout 60 python3 benchmarks/gpu_e2e.py --config "$3" --decode-only \
    --concurrency 1 --prefill-len 1024 --out "/tmp/v/e2e_$1.json" >"/tmp/v/e2e_$1.log" 2>&1
  echo "[${SECONDS}s] $1 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/e2e_$1.json" | tr '\n' ' ')"
}
for i in 1 2; do
  e2e "awq_new_$i" new benchmarks/configs/llama-3.1-8b-awq
  e2e "awq_orig_$i" orig benchmarks/configs/llama-3.1-8b-awq
done
e2e gptq_actorder new /tmp/v/gptq_true
[ $SECONDS -lt 230 ] && e2e gptq_plain new /tmp/v/gptq_false
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
