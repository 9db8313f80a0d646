#!/usr/bin/env bash
# Sixteenth session, run 3 (H200): GPTQ act-order (desc_act) support. The engine GPU tests (the new act-order layer
# and graphs-against-eager tests among them), then Llama-3.1-8B-shaped GPTQ int4 g128 dummy checkpoints at batch 1,
# without and with act-order (the same kernels as AWQ; act-order gathers each projection's input and runs the
# norm and SiLU-and-mul kernels separately), interleaved. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
gpu_tests engine_gpu_tests 170 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
for act in false true; do
  mkdir -p "/tmp/v/gptq_$act"
  python3 - "$act" <<'EOF'
import json, sys
act = sys.argv[1] == "true"
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False,
                              "desc_act": act, "checkpoint_format": "gptq"}
json.dump(cfg, open(f"/tmp/v/gptq_{sys.argv[1]}/config.json", "w"), indent=2)
EOF
done
for i in 1 2; do
  for act in false true; do
    timeout 90 python3 benchmarks/gpu_e2e.py --config "/tmp/v/gptq_$act" --decode-only --concurrency 1 \
      --prefill-len 1024 --out "/tmp/v/gptq_${act}_$i.json" >"/tmp/v/gptq_${act}_$i.log" 2>&1
    echo "[${SECONDS}s] gptq desc_act=$act run $i rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/gptq_${act}_$i.json" | tr '\n' ' ')"
  done
done
timeout 80 python3 benchmarks/decode_timeline.py --config /tmp/v/gptq_true --out /tmp/v/timeline_actorder.json \
  >/tmp/v/timeline_actorder.log 2>&1
echo "[${SECONDS}s] act-order decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_actorder.log | head -12
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
