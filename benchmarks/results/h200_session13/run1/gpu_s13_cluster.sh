#!/usr/bin/env bash
# Thirteenth session (H200): the skinny GEMV's K splits merged through a thread-block cluster (schedule flag 16,
# now in the default) against the workspace-and-counter merge (flags 6). Quantized GPU tests first, then M=1 cold
# timing of issue 6's shapes under both, then Llama-3.1-8B AWQ batch 1 interleaved.
# Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
quant_tests 300
python3 - <<'PY'
import sys
sys.path.insert(0, "benchmarks")
import torch
import quant_bench as qb
from revolta_kernels import native_quant
copy = qb.copy_bandwidth()
print(f"copy {copy:.0f} GB/s")
shapes = [qb.Shape(k, n) for k, n in qb.SHAPES]
for rnd in (1, 2):
    for flags in (6, 22):
        native_quant.tune(gemv_flags=flags)
        cells = []
        for sh in shapes[:5]:
            plan = native_quant.plan(1, sh.n, sh.k, 4, 128, torch.device("cuda"))
            us = sh.skinny_us(1, cold=True)
            cells.append(f"{sh.k}x{sh.n} {us:5.2f}us {100 * qb.m1_bytes(sh.k, sh.n) / us / 1e3 / copy:4.1f}% "
                         f"s{plan['splits']}c{plan['cluster']}")
        print(f"round {rnd} flags {flags:2d}: " + " | ".join(cells), flush=True)
    for flags in (6, 22):
        native_quant.tune(gemv_flags=flags)
        print(f"round {rnd} flags {flags:2d} M=4/8 cold: " + " ".join(
            f"{sh.k}x{sh.n} m{m} {100 * qb.m1_bytes(sh.k, sh.n, m) / sh.skinny_us(m, cold=True) / 1e3 / copy:4.1f}%"
            for sh in shapes[:5] for m in (4, 8)), flush=True)
native_quant.tune()
PY
for round in 1 2; do
  awq_e2e "cluster_$round" ""
  awq_e2e "counter_$round" "0,0,1,-1,-1,-1,0,0,-1,6"
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
