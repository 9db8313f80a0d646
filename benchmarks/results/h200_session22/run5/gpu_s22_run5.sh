#!/usr/bin/env bash
# Session 22, run 5 (H200): int8 activations also for act-order GPTQ (the gathering split-K kernel) and 8-bit weights
# (one dp4a per packed word). Quantized-kernel and engine GPU tests, then Llama-3.1-8B-shaped GPTQ batch 1 (act-order
# int4, int8 weights) with activation_quant none / int8, and AWQ int8 again.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs v5
export REVOLTA_NATIVE_LIB=/tmp/libs/v5/librevolta_native.so
T=packages/revolta-kernels/tests
gpu_tests quant 300 $T/test_quant_xq_gpu.py $T/test_quant_order_gpu.py $T/test_quant_rope_gpu.py $T/test_quant_gpu.py \
  $T/test_quant_norm_gpu.py
gptq_config /tmp/v/gptq_act True
mkdir -p /tmp/v/gptq8 && python3 - <<'PY'
import json
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": True, "desc_act": False,
                              "checkpoint_format": "gptq"}
json.dump(cfg, open("/tmp/v/gptq8/config.json", "w"), indent=2)
PY
e2e gptq_act_none /tmp/v/gptq_act
e2e gptq_act_int8 /tmp/v/gptq_act REVOLTA_ACTIVATION_QUANT=int8
e2e gptq8_none /tmp/v/gptq8
e2e gptq8_int8 /tmp/v/gptq8 REVOLTA_ACTIVATION_QUANT=int8
e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
gpu_tests engine 150 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
