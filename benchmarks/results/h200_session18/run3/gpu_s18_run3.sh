#!/usr/bin/env bash
# Session 18, run 3 (H200): the act-order split-K-free kernel gathers from shared-memory copies of x (or h) and the
# norm weight (every block gathers the whole K; from L2 each 2-byte element costs a sector). Every kernel and engine
# GPU test; Llama-3.1-8B-shaped batch 1 interleaved (AWQ, GPTQ plain, GPTQ act-order) and the act-order timeline;
# then issue 6's figures: quant_bench (M = 1 and M = 4096 against the copy / matmul ceilings), the fp16 engine's
# batch 1; and stop 27's light decode attention for head_dim 256 at batch 1 (Qwen3.5-27B AWQ shape, default rule
# against REVOLTA_DECODE_LIGHT=2 / 0).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=$ROOT/.devcarry/librevolta_native.so
device_init
python3 -c "import revolta_kernels as k; print(k.native_status())"
gpu_tests kernel_gpu_tests 200 packages/revolta-kernels/tests
gpu_tests engine_gpu_tests 200 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
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
e2e() {  # e2e LABEL CONFIG [ARGS...]
  local label="$1" cfg="$2"; shift 2
  timeout 90 python3 benchmarks/gpu_e2e.py --config "$cfg" --decode-only --concurrency 1 --prefill-len 1024 \
    --out "/tmp/v/e2e_$label.json" "$@" >"/tmp/v/e2e_$label.log" 2>&1
  echo "[${SECONDS}s] $label rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/e2e_$label.json" | tr '\n' ' ')"
}
e2e fp16 benchmarks/configs/llama-3.1-8b
for i in 1 2; do
  e2e "awq_$i" benchmarks/configs/llama-3.1-8b-awq --baseline /tmp/v/e2e_fp16.json
  e2e "gptq_plain_$i" /tmp/v/gptq_false
  e2e "gptq_actorder_$i" /tmp/v/gptq_true
done
timeout 80 python3 benchmarks/decode_timeline.py --config /tmp/v/gptq_true --out /tmp/v/timeline_actorder.json \
  >/tmp/v/timeline_actorder.log 2>&1
echo "[${SECONDS}s] act-order decode timeline rc=$?"; grep -E "tok/s|on the path" /tmp/v/timeline_actorder.log | head -6
timeout 170 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench.json >"$OUT/quant_bench.log" 2>&1
echo "[${SECONDS}s] quant_bench rc=$?"; grep -vE "^\s*$" "$OUT/quant_bench.log" | tail -14
for mode in 1 0; do
  [ $SECONDS -gt 520 ] && break
  REVOLTA_DECODE_LIGHT=$mode timeout 60 python3 benchmarks/decode_timeline.py --config benchmarks/configs/qwen3.5-27b-awq \
    --prompt-len 512 --output-len 64 --reps 3 --out "/tmp/v/tl27b_m$mode.json" >"/tmp/v/tl27b_m$mode.log" 2>&1
  echo "[${SECONDS}s] qwen3.5-27b-awq light mode $mode rc=$?"; grep -E "tok/s|paged_decode" "/tmp/v/tl27b_m$mode.log" | head -3
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
cat /tmp/v/*.log > "$OUT/bench_logs.txt"
echo "[${SECONDS}s] done"
