#!/usr/bin/env bash
# Session 37, run 3 (one GPU): on one machine, ncu durations of one Qwen3.5-35B-A3B layer at 1024 tokens for main
# (m44 + main's Python, session 36's sorted_profile.py) and for m45's unfused and gather_scatter variants (run 2
# found m45's plain GEMMs 413 / 272 us against session 36's 370 / 225 on another machine, with the K loop's SASS
# the same); then the bench before / variants again.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m44 m45
NEW_PATH="$PYTHONPATH"
rm -rf /tmp/before && mkdir -p /tmp/before && tar xzf .devcarry/before_src.tgz -C /tmp/before
OLD_PATH="/tmp/site:$(ls -d /tmp/before/packages/*/src | tr '\n' ':')"
D=benchmarks/results/h200_session37/run2
summ() {
  python3 - "$1" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
ki, vi = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
vals = [(float(r[vi].replace(",", "")) / 1e3, r[ki][:90]) for r in rows[1:] if r[ki] != "Kernel Name"]
for v, k in vals:
    if v > 12: print(f"  {v:8.1f} us  {k}")
print(f"  {sum(v for v, _ in vals):8.1f} us total")
PY
}
for round in 1 2; do
  env PYTHONPATH="$OLD_PATH" $(lib m44) timeout 100 ncu --clock-control none --nvtx --nvtx-include "profiled/" \
    --metrics gpu__time_duration.sum --csv python3 benchmarks/results/h200_session36/run3/sorted_profile.py 1024 \
    > $OUT/durations_before_$round.csv 2> /tmp/v/ncu_before.err
  echo "[${SECONDS}s] durations before rc=$?"; summ $OUT/durations_before_$round.csv
  for v in unfused gather_scatter; do
    env $(lib m45) timeout 100 ncu --clock-control none --nvtx --nvtx-include "profiled/" --metrics gpu__time_duration.sum \
      --csv python3 $D/variants.py --profile $v 1024 > $OUT/durations_${v}_$round.csv 2> /tmp/v/ncu_$v.err
    echo "[${SECONDS}s] durations $v rc=$?"; summ $OUT/durations_${v}_$round.csv
  done
done
env PYTHONPATH="$OLD_PATH" $(lib m44) timeout 60 python3 benchmarks/quant_moe_sorted_bench.py --sorted-only \
  --models Qwen3.5-35B-A3B --out /tmp/v/sorted_before.json > /tmp/v/sorted_before.log 2>&1
echo "[${SECONDS}s] sorted bench before rc=$?"; grep -E "T= *(8|64|256|1024) " /tmp/v/sorted_before.log | tr -s ' '
env $(lib m45) timeout 200 python3 $D/variants.py > /tmp/v/variants.log 2>&1
echo "[${SECONDS}s] variants rc=$?"; grep -v Warn /tmp/v/variants.log
pack_logs
echo "[${SECONDS}s] done"
