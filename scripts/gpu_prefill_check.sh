#!/usr/bin/env bash
# On the GPU machine (prefill helper): the attention prefill GPU tests (every fp16/d128 tuning variant
# included), then the 8K causal prefill benchmark with SDPA and the fp16 matmul rate measured in the same
# run, and the prefill variant sweep (twice, for noise); optionally ncu of a few variants (PROFILE_VARIANTS).
# Expects REVOLTA_NATIVE_LIB and PYTHONPATH set by the caller; writes under $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_prefill_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$ROOT"
python3 -c 'import revolta_kernels as r; print(r.native_status())'
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader || true
t0=$(date +%s)
timeout "${T_TEST:-120}" python3 -m pytest packages/revolta-kernels/tests/test_attention_gpu.py -q -m gpu -k prefill \
  -p no:cacheprovider -o addopts="" >"$OUT/prefill_gpu_tests.log" 2>&1
echo "prefill GPU tests rc=$? in $(( $(date +%s) - t0 )) s"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/prefill_gpu_tests.log" | tail -30
cd "$ROOT/benchmarks"
for pass in 1 2; do
  t0=$(date +%s)
  timeout "${T_BENCH:-75}" python3 kernels_bench.py --prefill-only --sweep --out "$OUT/prefill_bench_$pass.json" \
    >"$OUT/prefill_bench_$pass.log" 2>&1
  echo "prefill bench pass $pass rc=$? in $(( $(date +%s) - t0 )) s"; grep -vE "^\{|native" "$OUT/prefill_bench_$pass.log" | tail -22
done
if [ -n "${PROFILE_VARIANTS:-}" ] && command -v ncu >/dev/null; then
  timeout "${T_NCU:-70}" ncu --clock-control none --kernel-name regex:"paged_prefill" --launch-count 8 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy \
    --section LaunchStats python3 kernels_profile.py --prefill-variants "$PROFILE_VARIANTS" >"$OUT/prefill_ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "paged_prefill|Duration|Compute \(SM\) Th|L1/TEX Cache Th|Registers Per|Achieved Occ|Warp Cycles Per Issued|Issued Ipc|Local Memory Spilling Req" "$OUT/prefill_ncu.txt" | head -70
  M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
  for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected \
           dispatch_stall no_instruction branch_resolving lg_throttle; do
    M="$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  timeout "${T_NCU2:-60}" ncu --clock-control none --kernel-name regex:"paged_prefill" --launch-count 8 --metrics "$M" \
    python3 kernels_profile.py --prefill-variants "$PROFILE_VARIANTS" >"$OUT/prefill_ncu_stalls.txt" 2>&1
  echo "ncu stalls rc=$?"
  grep -vE "^==PROF==|^\s*$|Warning" "$OUT/prefill_ncu_stalls.txt" | grep -E "paged_prefill|hmma|inst_exec|stalled" | \
    sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -80
fi
