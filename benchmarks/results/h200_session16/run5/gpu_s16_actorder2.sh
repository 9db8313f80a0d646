#!/usr/bin/env bash
# Sixteenth session, run 5 (H200): act-order with the Llama MLP's down-projection order folded into gate/up's output
# columns. The engine GPU tests, then GPTQ int4 g128 Llama-8B-shaped batch 1 without / with act-order, and the
# act-order decode timeline. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
gpu_tests engine_gpu_tests 170 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
for act in false true; do
  mkdir -p "/tmp/v/gptq_$act"
  python3 - "$act" <<'EOF'
import json, sys
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False,
                              "desc_act": sys.argv[1] == "true", "checkpoint_format": "gptq"}
json.dump(cfg, open(f"/tmp/v/gptq_{sys.argv[1]}/config.json", "w"), indent=2)
EOF
  timeout 90 python3 benchmarks/gpu_e2e.py --config "/tmp/v/gptq_$act" --decode-only --concurrency 1 \
    --prefill-len 1024 --out "/tmp/v/gptq_$act.json" >"/tmp/v/gptq_$act.log" 2>&1
  echo "[${SECONDS}s] gptq desc_act=$act rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/gptq_$act.json" | tr '\n' ' ')"
done
timeout 80 python3 benchmarks/decode_timeline.py --config /tmp/v/gptq_true --out /tmp/v/timeline_actorder.json \
  >/tmp/v/timeline_actorder.log 2>&1
echo "[${SECONDS}s] act-order decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_actorder.log | head -12
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
