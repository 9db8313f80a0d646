#!/usr/bin/env bash
# Session 19, run 3 (H200): where the skinny AWQ kernels' warps stall (Nsight Compute warp-state sampling), to test
# whether instruction fetch (stall "no instruction": the unrolled kernels are 120-140 KB of SASS) costs them issue
# slots, on main's library with benchmarks/gemv_ncu_target.py (Llama-3.1-8B's decode shapes, M = 1).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs/main && xz -dc .devcarry/main.so.xz > /tmp/libs/main/librevolta_native.so
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/main/librevolta_native.so
device_init
command -v ncu || { echo "no ncu"; exit 1; }
M=smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
timeout 200 ncu --clock-control none --kernel-name regex:"quant_gemv" --launch-count 12 --metrics $M --csv \
  python3 benchmarks/gemv_ncu_target.py --reps 2 > "$OUT/ncu_stalls.csv" 2> "$OUT/ncu_stalls.err"
echo "[${SECONDS}s] ncu rc=$?"; tail -3 "$OUT/ncu_stalls.err"
python3 - "$OUT/ncu_stalls.csv" <<'PY'
import csv, sys
from collections import defaultdict
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, mi, vi, ii = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("ID")
by = defaultdict(dict)
for r in rows:
    by[(r[ii], r[ki][:48])][r[mi].replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", "")] = r[vi]
for (i, k), m in by.items():
    top = sorted(((float(v.replace(",", "")), n) for n, v in m.items() if not n.startswith(("smsp__inst", "gpu__", "dram__"))), reverse=True)[:6]
    print(i, k, "time", m.get("gpu__time_duration.sum"), "dram%", m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
          "|", " ".join(f"{n}={v:.2f}" for v, n in top))
PY
echo "[${SECONDS}s] done"
