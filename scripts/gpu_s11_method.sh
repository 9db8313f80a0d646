#!/usr/bin/env bash
# Eleventh session, run 5 (H200): what moved batch-1 decode between runs 3 and 4, the measurement or the engine's
# maximum length. For Llama-3.1-8B fp16 and AWQ g128 at max_model_len 1088 (--prefill-len 1024) and 8256 (the fp16
# run's default --prefill-len 8192): the single (prefill-only, full) pair that gpu_e2e.py timed before this session,
# right after the 64-token warm-up, and then decode_rate (an untimed generation at the prompt's length, median of
# three pairs). Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
for cfg in llama-3.1-8b llama-3.1-8b-awq; do
  for plen in 1024 8192; do
    timeout 90 python3 - "$cfg" "$plen" <<'PY'
import json, sys
sys.path.insert(0, "benchmarks")
import gpu_e2e
cfg, plen = sys.argv[1], int(sys.argv[2])
args = gpu_e2e.parse_args(["--config", f"benchmarks/configs/{cfg}", "--decode-only", "--concurrency", "1",
                           "--prefill-len", str(plen)])
llm, _ = gpu_e2e.make_llm(args)
vocab = int(llm.llm_engine.hf_config.vocab_size)
gpu_e2e.timed_generate(llm, gpu_e2e.random_prompts(2, 64, vocab, 0), 8)
p1 = gpu_e2e.random_prompts(1, 512, vocab, 1)
t_prefill = gpu_e2e.timed_generate(llm, p1, 1)
t_full = gpu_e2e.timed_generate(llm, p1, 256)
single = 255 / (t_full - t_prefill)
robust = gpu_e2e.decode_rate(llm, p1[0], 256)
again = 255 / (gpu_e2e.timed_generate(llm, p1, 256) - gpu_e2e.timed_generate(llm, p1, 1))
print(json.dumps({"config": cfg, "max_model_len": plen + 64, "single_pair_first": single, "t_prefill_first_ms": t_prefill * 1e3,
                  "decode_rate": robust, "single_pair_later": again}))
PY
  done
done 2>&1 | grep '^{' | tee "$OUT/method.jsonl"
