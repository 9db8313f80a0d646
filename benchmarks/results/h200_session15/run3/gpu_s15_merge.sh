#!/usr/bin/env bash
# Fifteenth session, run 3 (H200): the decode split merge with several threads per output (merge_splits `ways`)
# and the light kernel's 256-thread variant counted by the splits that can get keys. Library A/B: $BASE_LIB
# (main) against $REVOLTA_NATIVE_LIB (this change). GPU tests of the attention (default, every case on the light
# kernel, and that forced wide), the fused rotary attention and the engine; AWQ Llama-3.1-8B batch 1 interleaved
# at the bar's setting (512-token prompt) and with 1024 / 2048-token prompts. Caller sets PYTHONPATH etc.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
NEW_LIB="$REVOLTA_NATIVE_LIB"
K=packages/revolta-kernels/tests
gpu_tests attn 150 $K/test_attention_gpu.py $K/test_rope_attention_gpu.py
REVOLTA_DECODE_LIGHT=2 gpu_tests attn_light 150 $K/test_attention_gpu.py $K/test_rope_attention_gpu.py
REVOLTA_DECODE_LIGHT=2 REVOLTA_DECODE_LIGHT_WIDE=1 gpu_tests attn_wide 150 $K/test_attention_gpu.py
gpu_tests engine 200 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
ab() {  # LABEL LIB INPUT PREFILL [ENV=VALUE]
  env REVOLTA_NATIVE_LIB="$2" ${5:-X=1} timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --input-len "$3" --prefill-len "$4" --out "/tmp/v/awq_$1.json" >"/tmp/v/awq_$1.log" 2>&1
  echo "[${SECONDS}s] awq $1 (input $3, max_model_len $4+64 ${5:-}) rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$1.json" | tr '\n' ' ')"
}
ab base512a "$BASE_LIB" 512 1024; ab new512a "$NEW_LIB" 512 1024; ab base512b "$BASE_LIB" 512 1024; ab new512b "$NEW_LIB" 512 1024
ab base1k "$BASE_LIB" 1024 1984; ab new1k "$NEW_LIB" 1024 1984; ab base1kb "$BASE_LIB" 1024 1984; ab new1kb "$NEW_LIB" 1024 1984
ab base2k "$BASE_LIB" 2048 4032; ab base2k_wide "$BASE_LIB" 2048 4032 REVOLTA_DECODE_LIGHT_WIDE=1; ab new2k "$NEW_LIB" 2048 4032
cat /tmp/v/awq_*.json > "$OUT/awq_runs.json" 2>/dev/null
