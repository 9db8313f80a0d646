#!/usr/bin/env bash
# helper qgemv device runs (run from the repo root with PYTHONPATH / REVOLTA_NATIVE_LIB set, see the brief).
# RUN=1: in-kernel timing probe of PDL chains (probe library librevolta_probe.so), Nsight Compute of the M=1
#        kernels, smoke tests of the new schedule flags. RUN=2: GPU tests, gemv_bench awq + llama8b, sweeps,
#        decode_timeline.
set -uo pipefail
OUT="${OUT:-/tmp/qgemv_out}"
mkdir -p "$OUT"
RUN="${RUN:-1}"
K=packages/revolta-kernels
LIB="$REVOLTA_NATIVE_LIB"
t0=$(date +%s)
el() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
if [ "$RUN" = 1 ]; then
  el probe
  REVOLTA_NATIVE_LIB=$PWD/librevolta_probe.so timeout 70 python3 benchmarks/gemv_probe.py \
    --tunes "0,0,1,-1,-1,-1,0,0,-1,1;0,0,1,-1,-1,-1,0,0,-1,2;0,0,1,-1,-1,-1,0,0,-1,3" --out "$OUT/probe.json" \
    > "$OUT/probe.log" 2>&1; echo "probe rc=$?"
  grep -v "^  " "$OUT/probe.log" | head -40; grep -E "^  " "$OUT/probe.log" | head -60
  el smoke tests flags=3
  REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,3" timeout 45 python3 -m pytest -q -x -p no:cacheprovider -o addopts="" \
    $K/tests/test_quant_norm_gpu.py -k "fused_norm_matches or no_residual or chain_matches or graph_replay" \
    > "$OUT/smoke_tests.log" 2>&1; echo "smoke rc=$?"; tail -3 "$OUT/smoke_tests.log"
  REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,1,0,1,3" timeout 25 python3 -m pytest -q -x -p no:cacheprovider -o addopts="" \
    $K/tests/test_quant_gpu.py -k "native_matches or graph_replay or bitwise" >> "$OUT/smoke_tests.log" 2>&1
  echo "smoke2 rc=$?"; tail -2 "$OUT/smoke_tests.log"
  el ncu
  timeout 75 /usr/local/cuda/bin/ncu --kernel-name regex:quant_gemv --launch-count 12 --clock-control none \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --csv --page details \
    python3 benchmarks/gemv_ncu_target.py --reps 2 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"; echo "ncu rc=$?"
  tail -3 "$OUT/ncu.err"
  python3 - "$OUT/ncu.csv" <<'PY' | tee "$OUT/ncu_summary.txt"
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
data = collections.OrderedDict()
want = ("Duration", "DRAM Throughput", "Memory Throughput", "Achieved Occupancy", "Theoretical Occupancy",
        "Registers Per Thread", "Grid Size", "Issue Slots Busy", "No Eligible", "Warp Cycles Per Issued Instruction",
        "Block Limit Registers", "Waves Per SM", "Executed Ipc Active", "Active Warps Per Scheduler",
        "Eligible Warps Per Scheduler", "L2 Hit Rate", "Max Bandwidth", "Compute (SM) Throughput", "Mem Busy")
for r in rows:
    if r and r[0] == "ID":
        hdr = r; continue
    if hdr is None or len(r) != len(hdr): continue
    d = dict(zip(hdr, r))
    key = (d["ID"], d["Kernel Name"][:60], d.get("Grid Size", ""))
    name = d["Metric Name"]
    if any(w in name for w in want):
        data.setdefault(key, []).append(f"{name}={d['Metric Value']}{d['Metric Unit']}")
for key, vals in data.items():
    print(key[0], key[1]); print("   " + "; ".join(vals))
PY
  # the warp-stall breakdown (raw)
  grep -i "stall\|Warp Cycles" "$OUT/ncu.csv" | head -0
fi
if [ "$RUN" = 2 ]; then
  left() { local l=$(( ${BUDGET:-228} - ($(date +%s) - t0) )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo $l; }
  el tests
  timeout $(left 80) python3 -m pytest -q -p no:cacheprovider -o addopts="" $K/tests/test_quant_gpu.py $K/tests/test_quant_norm_gpu.py \
    > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -2 "$OUT/tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
  el ab
  timeout $(left 45) python3 benchmarks/gemv_flags_ab.py --flags 0,2,4,6 --rounds 5 --out "$OUT/ab.json" 2>&1 | tail -6
  el bench default
  timeout $(left 30) python3 benchmarks/gemv_bench.py --sections awq --out "$OUT/bench_default.json" \
    > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
  el bench flags0
  REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,0" timeout $(left 30) python3 benchmarks/gemv_bench.py --sections awq \
    --out "$OUT/bench_flags0.json" >> "$OUT/bench.log" 2>&1; echo "bench0 rc=$?"; grep -E "AWQ|copy" "$OUT/bench.log"
  el timeline
  timeout $(left 60) python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq --out "$OUT/tl.json" \
    > "$OUT/tl.log" 2>&1; echo "timeline rc=$?"; grep -A15 "tok/s" "$OUT/tl.log" | head -16; tail -2 "$OUT/tl.log"
  el timeline flags0
  REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,0" timeout $(left 60) python3 benchmarks/decode_timeline.py \
    --config benchmarks/configs/llama-3.1-8b-awq --out "$OUT/tl_flags0.json" > /tmp/tl_flags0.log 2>&1
  echo "timeline0 rc=$?"; grep -A15 "tok/s" /tmp/tl_flags0.log | head -16
  { echo "==== REVOLTA_QUANT_TUNE flags 0"; cat /tmp/tl_flags0.log; } >> "$OUT/tl.log"
fi
el done
