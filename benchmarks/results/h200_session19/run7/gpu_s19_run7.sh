#!/usr/bin/env bash
# Session 19, run 7 (H200): the act-order gap with the gathering kernel for every split-K call. Library = main +
# REVOLTA_GATHER_ALL=1 (run7/gather_all.patch: M = 1 split-K calls without an order also go to
# quant_gemv_gather_kernel, so an act-order model's gate_up and down run the same kernel function again, as in
# ede4e7d). AWQ and GPTQ act-order batch 1, default against gather-all, interleaved; per-layer timelines.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs/ga && xz -dc .devcarry/gather_all.so.xz > /tmp/libs/ga/librevolta_native.so
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/ga/librevolta_native.so
device_init
mkdir -p /tmp/v/gptq_true
python3 - <<'PY'
import json
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False,
                              "desc_act": True, "checkpoint_format": "gptq"}
json.dump(cfg, open("/tmp/v/gptq_true/config.json", "w"), indent=2)
PY
e2e() {  # e2e LABEL GATHER_ALL CONFIG
  REVOLTA_GATHER_ALL=$2 timeout 60 python3 benchmarks/gpu_e2e.py --config "$3" --decode-only \
    --concurrency 1 --prefill-len 1024 --out "/tmp/v/e2e_$1.json" >"/tmp/v/e2e_$1.log" 2>&1
  echo "[${SECONDS}s] $1 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/e2e_$1.json" | tr '\n' ' ')"
}
for i in 1 2; do
  e2e "awq_default_$i" 0 benchmarks/configs/llama-3.1-8b-awq
  e2e "awq_gatherall_$i" 1 benchmarks/configs/llama-3.1-8b-awq
  e2e "actorder_default_$i" 0 /tmp/v/gptq_true
  e2e "actorder_gatherall_$i" 1 /tmp/v/gptq_true
done
for t in awq:benchmarks/configs/llama-3.1-8b-awq actorder:/tmp/v/gptq_true; do
  REVOLTA_GATHER_ALL=1 timeout 60 python3 benchmarks/decode_timeline.py --config ${t#*:} --reps 3 \
    --out /tmp/v/timeline_${t%%:*}_gatherall.json >/tmp/v/timeline_${t%%:*}.log 2>&1
  echo "[${SECONDS}s] ${t%%:*} timeline gather-all rc=$? $(grep -E 'tok/s' /tmp/v/timeline_${t%%:*}.log | head -1)"
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
