#!/usr/bin/env bash
# Session 37, run 2 (one GPU), library m45: run 1 measured the sorted path with every row map slower than session 36's
# (Qwen3.5-35B-A3B at 1024 tokens 964 against 735 us; the SiLU kernel 490 us). Which maps pay: run2/variants.py times
# the five variants; ncu durations of one layer at 1024 tokens for unfused and gather_scatter.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m45
export $(lib m45)
D=benchmarks/results/h200_session37/run2
timeout 200 python3 $D/variants.py > /tmp/v/variants.log 2>&1
echo "[${SECONDS}s] variants rc=$?"; cat /tmp/v/variants.log | grep -v Warn
for v in unfused gather_scatter; do
  timeout 100 ncu --clock-control none --nvtx --nvtx-include "profiled/" --metrics gpu__time_duration.sum \
    --csv python3 $D/variants.py --profile $v 1024 > $OUT/durations_$v.csv 2> /tmp/v/ncu_$v.err
  echo "[${SECONDS}s] durations $v rc=$?"
  python3 - "$OUT/durations_$v.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
ki, vi = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
vals = [(float(r[vi].replace(",", "")) / 1e3, r[ki][:90]) for r in rows[1:] if r[ki] != "Kernel Name"]
for v, k in vals: print(f"  {v:8.1f} us  {k}")
print(f"  {sum(v for v, _ in vals):8.1f} us total")
PY
done
pack_logs
echo "[${SECONDS}s] done"
