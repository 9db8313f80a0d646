#!/usr/bin/env bash
# Session 38, run 6 (one GPU): the reduce-scatter score loop on head_dim 256 / GQA group 8 (Qwen3.5's attention
# layers), where it sums 16 values per 2 keys over 32 lanes (16 shuffles instead of 80). m47 = main (55b6896),
# m51 = the final tree (SASS identical to run 5's m50). Qwen3.5-35B-A3B AWQ batch 1 after a 1024-token prompt,
# interleaved, two rounds.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m47 m51
for round in 1 2; do
  for v in m47 m51; do
    HYBRID_PROMPT_LEN=1024 hybrid_run ${v}_$round benchmarks/configs/qwen3.5-35b-a3b-awq $(lib $v)
  done
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
