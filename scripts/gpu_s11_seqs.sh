#!/usr/bin/env bash
# Eleventh session, run 6 (H200): batch-1 decode with the engine sized for 64 sequences (max_num_seqs 64, as the full
# fp16 gpu_e2e run has it) against 1 (run 5: fp16 247-251 tok/s there, 260 in the full runs). gpu_e2e.py (decode_rate)
# --decode-only, fp16 and AWQ g128, --concurrency 64 and 1, max_model_len 8256. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
for conc in 64 1; do
  timeout 90 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --decode-only --concurrency $conc \
    --out "/tmp/v/fp16_c$conc.json" >"/tmp/v/fp16_c$conc.log" 2>&1
  echo "[${SECONDS}s] fp16 seqs $conc rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/fp16_c$conc.json" | tr '\n' ' ')"
  timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only --concurrency $conc \
    --baseline "/tmp/v/fp16_c$conc.json" --out "/tmp/v/awq_c$conc.json" >"/tmp/v/awq_c$conc.log" 2>&1
  echo "[${SECONDS}s] awq seqs $conc rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline|speedup_over_baseline)": [0-9.]+' "/tmp/v/awq_c$conc.json" | tr '\n' ' ')"
done
grep -h "CUDA graphs" /tmp/v/*_c*.log
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*_c*.json
