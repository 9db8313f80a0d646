#!/usr/bin/env bash
# Fifteenth session, run 1 (H200): the fused q/k/v projection's KV-cache L2 prefetch (gemv_rope_kv_prefetch).
# GPU tests of the fused projection, the attention and the engine's fused path; then AWQ Llama-3.1-8B batch 1
# interleaved with the prefetch off (REVOLTA_KV_PREFETCH_MB=0) and on (the default cap), and the decode timeline
# both ways. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem --format=csv,noheader
gpu_tests tests 200 packages/revolta-kernels/tests/test_quant_rope_gpu.py packages/revolta-kernels/tests/test_rope_attention_gpu.py \
  packages/revolta-kernels/tests/test_attention_gpu.py packages/revolta-engine/tests/test_gpu_qkv_rope.py
ab() {  # LABEL MB
  env REVOLTA_KV_PREFETCH_MB="$2" timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --prefill-len 1024 --out "/tmp/v/awq_$1.json" >"/tmp/v/awq_$1.log" 2>&1
  echo "[${SECONDS}s] awq $1 (MB=$2) rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$1.json" | tr '\n' ' ')"
}
ab off1 0; ab on1 12; ab off2 0; ab on2 12; ab on3 ""
for mb in 0 12; do
  env REVOLTA_KV_PREFETCH_MB=$mb timeout 90 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
    --prompt-len 1024 --out "$OUT/timeline_mb$mb.json" >"/tmp/v/timeline_$mb.log" 2>&1
  echo "[${SECONDS}s] timeline MB=$mb rc=$?"
  python3 - "$OUT/timeline_mb$mb.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"  {d['batch1_decode_tok_s']:.1f} tok/s, forward {d['graph_forward_ms']:.3f} ms")
for r in d["critical_path"][:5]:
    print(f"  {r['path_us']:8.1f} us  {r['kernel'][:90]}")
PY
done
cat /tmp/v/awq_*.json > "$OUT/awq_runs.json" 2>/dev/null
cuobjdump --dump-resource-usage "$REVOLTA_NATIVE_LIB" 2>/dev/null | grep -A1 "quant_gemv_full_kernelILi1ELi16ELb1E" | grep -oE "REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | tr '\n' ' '; echo
