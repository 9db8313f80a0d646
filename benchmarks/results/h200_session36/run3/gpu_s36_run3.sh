#!/usr/bin/env bash
# Session 36, run 3 (one GPU): where a Qwen3.5-35B-A3B MoE layer's sorted path spends its time. Library m44 = main.
# 1. ncu durations of every kernel of one call at 128 and 1024 tokens (the last call, after three warm-up calls).
# 2. ncu sections (speed of light, occupancy, warp states, memory) of the two quant_moe_gemm launches at 1024 tokens.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m44
export $(lib m44)
R=benchmarks/results/h200_session36/run3
for t in 128 1024; do
  timeout 120 ncu --clock-control none --nvtx --nvtx-include "profiled/" --metrics gpu__time_duration.sum \
    --csv python3 $R/sorted_profile.py $t > $OUT/durations_$t.csv 2> /tmp/v/ncu_dur_$t.err
  echo "[${SECONDS}s] durations $t rc=$?"
  python3 - "$OUT/durations_$t.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
ki, vi = head.index("Kernel Name"), head.index("Metric Value")
tot = 0.0
for r in body:
    if r[ki] == "Kernel Name": continue
    v = float(r[vi].replace(",", "")) / 1e3
    tot += v
    print(f"  {v:8.1f} us  {r[ki][:110]}")
print(f"  {tot:8.1f} us total")
PY
done
timeout 240 ncu --clock-control none --nvtx --nvtx-include "profiled/" --kernel-name regex:quant_moe_gemm \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section LaunchStats --section SchedulerStats python3 $R/sorted_profile.py 1024 > $OUT/sections_1024.txt 2> /tmp/v/ncu_sec.err
echo "[${SECONDS}s] sections rc=$?"
grep -E "quant_moe_gemm|Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Registers|Block Limit|Warp Cycles Per Issued|Issue Slot|Eligible|Stall|L2 Hit|Mem Busy|Max Bandwidth|DRAM" $OUT/sections_1024.txt | head -80
tail -5 /tmp/v/ncu_sec.err /tmp/v/ncu_dur_1024.err
pack_logs
echo "[${SECONDS}s] done"
