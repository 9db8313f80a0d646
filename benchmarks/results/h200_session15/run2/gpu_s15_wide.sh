#!/usr/bin/env bash
# Fifteenth session, run 2 (H200): main's library; the batch-1 decode attention's variant at the bar's context
# (1024-token prompt, 256 decoded): AWQ Llama-3.1-8B batch 1 interleaved with the default choice, the 256-thread
# light kernel forced (REVOLTA_DECODE_LIGHT_WIDE=1) and the tensor-core kernel (REVOLTA_DECODE_LIGHT=0); the
# decode timeline of the first two. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
ab() {  # LABEL ENV=VALUE
  env "$2" timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq \
    --decode-only --concurrency 1 --prefill-len 1024 --out "/tmp/v/awq_$1.json" >"/tmp/v/awq_$1.log" 2>&1
  echo "[${SECONDS}s] awq $1 ($2) rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/awq_$1.json" | tr '\n' ' ')"
}
ab def1 X=1; ab wide1 REVOLTA_DECODE_LIGHT_WIDE=1; ab tc1 REVOLTA_DECODE_LIGHT=0
ab def2 X=1; ab wide2 REVOLTA_DECODE_LIGHT_WIDE=1
for arm in X=1 REVOLTA_DECODE_LIGHT_WIDE=1; do
  tag="${arm%%=*}"
  env "$arm" timeout 90 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
    --prompt-len 1024 --out "$OUT/timeline_$tag.json" >"/tmp/v/timeline_$tag.log" 2>&1
  echo "[${SECONDS}s] timeline $arm rc=$?"
  python3 - "$OUT/timeline_$tag.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"  {d['batch1_decode_tok_s']:.1f} tok/s, forward {d['graph_forward_ms']:.3f} ms")
for r in d["critical_path"][:5]:
    print(f"  {r['path_us']:8.1f} us  {r['kernel'][:90]}")
PY
done
