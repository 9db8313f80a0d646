#!/usr/bin/env bash
# Session 18, run 1 (H200): act-order GPTQ with the input order gathered inside the skinny kernels (x_order), and
# the stop-27 change (the light decode attention for head_dim 256 at batch 1). The new act-order kernel tests, every
# kernel and engine GPU test, then Llama-3.1-8B-shaped batch-1 decode, interleaved: AWQ g128 (the default path, to
# see that the staging's new branch costs it nothing), GPTQ int4 g128 without and with act-order; the act-order
# decode timeline. Started from the repository root with the library in .devcarry/ and the wheels in .whl/.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=$ROOT/.devcarry/librevolta_native.so
device_init
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
python3 -c "import revolta_kernels as k; print(k.native_status())"
gpu_tests order_gpu_tests 150 packages/revolta-kernels/tests/test_quant_order_gpu.py
gpu_tests kernel_gpu_tests 200 packages/revolta-kernels/tests
gpu_tests engine_gpu_tests 200 packages/revolta-engine/tests
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
e2e() {  # e2e LABEL CONFIG
  timeout 90 python3 benchmarks/gpu_e2e.py --config "$2" --decode-only --concurrency 1 --prefill-len 1024 \
    --out "/tmp/v/e2e_$1.json" >"/tmp/v/e2e_$1.log" 2>&1
  echo "[${SECONDS}s] $1 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/e2e_$1.json" | tr '\n' ' ')"
}
for i in 1 2; do
  e2e "awq_$i" benchmarks/configs/llama-3.1-8b-awq
  e2e "gptq_plain_$i" /tmp/v/gptq_false
  e2e "gptq_actorder_$i" /tmp/v/gptq_true
  [ $SECONDS -gt 420 ] && break
done
timeout 80 python3 benchmarks/decode_timeline.py --config /tmp/v/gptq_true --out /tmp/v/timeline_actorder.json \
  >/tmp/v/timeline_actorder.log 2>&1
echo "[${SECONDS}s] act-order decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_actorder.log | head -14
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
