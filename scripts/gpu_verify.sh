#!/usr/bin/env bash
# On a GPU machine: build the native kernels, run every kernel and engine GPU test, then the headline benchmarks
# (Llama-3.1-8B fp16 batch 1 / 64 concurrent / 8K prefill, Llama-3.1-8B AWQ batch 1, Qwen3.5-35B-A3B AWQ batch 1),
# and write summary.txt and results.json under $OUT (default ./gpu_verify_out). Wheels the machine lacks are
# taken from .whl/ when present.
#
# Usage: scripts/gpu_verify.sh [options]
#   --archs LIST        archs to build for (default $REVOLTA_CUDA_ARCHS, else 90)
#   --lib PATH          use this prebuilt library (.so, or .so.xz from scripts/build_lib.sh) instead of building
#   --compare-lib PATH  run the headline benchmarks also with this library, interleaved with the first; both go in
#                       results.json with the ratios compare_lib / lib (a before/after in one run)
#   --rounds N          headline rounds per library (default 1; figures are medians over rounds)
#   --only NAMES        only these headline benchmarks (comma-separated: llama8b_fp16,llama8b_awq,qwen35_35b_a3b_awq)
#   --tests-only        the GPU tests, no benchmarks
#   --bench-only        the benchmarks, no tests
#   --kernels           also the kernel benchmarks (kernels_bench.py, gemv_bench.py run) into the logs
#   --baseline KIND     also write baselines/KIND.json under $OUT (e.g. h100), for benchmarks/baselines/
#   --commit SHA        the commit measured, for results.json (default: the checkout's HEAD, if it is one)
#   --volta PATH        Volta mode: REVOLTA_EMULATE_ARCH=70 with this Volta library (librevolta_native_sm70.so, or
#                       .so.xz from `scripts/build_lib.sh volta "" "70;75"`) for the tests and the benchmarks, so
#                       the GPU runs the code a V100 runs (from the compute_70 PTX) with a V100's host choices;
#                       the benchmarks are batch-1 decode only. --lib (or the build) is then the modern library,
#                       used only by --parity
#   --parity            with --volta: teacher-forced logits, Volta library vs modern library, over 64 decode steps
#                       of each --only model (benchmarks/volta_parity.py) into volta_parity.json
#   --parity-only       only that (no tests, no benchmarks)
#
# Volta mode on a lent H100/H200, in three device calls (each meant to fit the 10-minute limit of one call; --only
# splits the benchmarks or the parity further), with the libraries built beforehand on a CPU machine:
#   scripts/build_lib.sh volta "-gencode=arch=compute_70,code=sm_90" "70;75"
#   scripts/build_lib.sh modern "" 90
# The extra -gencode compiles the same compute_70 PTX ahead of time for sm_90 (the code the driver's JIT would
# make from it), so the first process does not spend minutes JIT-compiling every kernel; without it the
# driver JIT-compiles at the first launch and keeps the results in its cache (CUDA_CACHE_MAXSIZE below) for later
# processes on the same machine. Then:
#   scripts/gpu_verify.sh --volta .devcarry/volta.so.xz --tests-only
#   scripts/gpu_verify.sh --volta .devcarry/volta.so.xz --bench-only
#   scripts/gpu_verify.sh --volta .devcarry/volta.so.xz --lib .devcarry/modern.so.xz --parity-only
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_verify_out}"
WORK="$(mktemp -d /tmp/gpu_verify.XXXXXX)"
BUILD=/tmp/revolta-kernels-build
BENCH_TIMEOUT=240
archs="${REVOLTA_CUDA_ARCHS:-90}" lib="" compare="" rounds=1 only="" tests=1 bench=1 kernels=0 baseline="" commit=""
volta="" parity=0
while [ $# -gt 0 ]; do
  case "$1" in
    --archs) archs="$2"; shift ;;
    --lib) lib="$2"; shift ;;
    --compare-lib) compare="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --only) only="$2"; shift ;;
    --tests-only) bench=0 ;;
    --bench-only) tests=0 ;;
    --kernels) kernels=1 ;;
    --baseline) baseline="$2"; shift ;;
    --commit) commit="$2"; shift ;;
    --volta) volta="$2"; shift ;;
    --parity) parity=1 ;;
    --parity-only) parity=1; tests=0; bench=0 ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# shellcheck source=scripts/device_common.sh
source "$ROOT/scripts/device_common.sh"
mkdir -p "$OUT"
cd "$ROOT" || exit 1
exec > >(tee "$WORK/verify.log") 2>&1
nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.mem,memory.total --format=csv,noheader
python_env || exit 1

if [ -n "$lib" ]; then
  lib="$(library_at "$lib" lib)" || exit 1
elif [ -z "$volta" ] || [ "$parity" = 1 ]; then  # Volta mode needs the modern library only to compare with it
  lib="$(build_native "$archs")" || { cp "$WORK/build.log" "$OUT/"; exit 1; }
fi
[ -z "$lib" ] || check_library "$lib" || exit 1
if [ -n "$volta" ]; then
  volta="$(library_at "$volta" volta librevolta_native_sm70.so)" || exit 1
  export REVOLTA_EMULATE_ARCH=70
  export CUDA_CACHE_MAXSIZE=4294967296  # keep the driver's PTX JIT results of every kernel between processes
  check_library "$volta" || exit 1
fi
under_test="${volta:-$lib}"
libs=(--lib "lib=$under_test")
if [ -n "$compare" ]; then
  compare="$(library_at "$compare" compare)" && check_library "$compare" || exit 1
  libs+=(--lib "compare_lib=$compare")
fi
export REVOLTA_NATIVE_LIB="$under_test"

if [ "$tests" = 1 ]; then
  gpu_tests kernels 300 packages/revolta-kernels/tests
  gpu_tests engine 300 packages/revolta-engine/tests
fi

if [ "$bench" = 1 ]; then
  for name in $(python3 benchmarks/common/results.py names); do
    [ -n "$only" ] && [[ ",$only," != *",$name,"* ]] && continue
    extra=()
    [ -n "$volta" ] && [ "$name" = llama8b_fp16 ] && extra=(--decode-only --concurrency 1 --prefill-len 1024)
    for round in $(seq 1 "$rounds"); do
      headline "$name" a "$round" "$under_test" "${extra[@]}"
      [ -n "$compare" ] && headline "$name" b "$round" "$compare" "${extra[@]}"
    done
  done
  if [ "$kernels" = 1 ]; then
    timeout 120 python3 benchmarks/kernels_bench.py --out "$WORK/kernels_bench.json" >"$WORK/kernels_bench.log" 2>&1
    echo "[${SECONDS}s] kernels_bench rc=$?"
    timeout 120 python3 benchmarks/gemv_bench.py run --out "$WORK/gemv_bench.json" >"$WORK/gemv_bench.log" 2>&1
    echo "[${SECONDS}s] gemv_bench rc=$?"
  fi
fi

if [ "$parity" = 1 ]; then
  [ -n "$volta" ] || { echo "--parity needs --volta"; exit 2; }
  declare -A parity_config=([llama8b_fp16]=llama-3.1-8b [llama8b_awq]=llama-3.1-8b-awq
                            [qwen35_35b_a3b_awq]=qwen3.5-35b-a3b-awq)
  configs=()
  for name in llama8b_fp16 llama8b_awq qwen35_35b_a3b_awq; do
    [ -n "$only" ] && [[ ",$only," != *",$name,"* ]] && continue
    configs+=(--config "benchmarks/configs/${parity_config[$name]}")
  done
  timeout 560 python3 benchmarks/volta_parity.py --volta-lib "$volta" --modern-lib "$lib" "${configs[@]}" \
    --timeout 300 --out "$OUT/volta_parity.json" >"$WORK/volta_parity.log" 2>&1
  echo "$?" >"$WORK/volta_parity.rc"
  echo "[${SECONDS}s] volta_parity rc=$(cat "$WORK/volta_parity.rc")"
  grep -A4 "^model " "$WORK/volta_parity.log"
fi

python3 benchmarks/common/results.py collect --dir "$WORK" --out "$OUT" --root "$ROOT" "${libs[@]}" \
  --gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
  ${baseline:+--baseline "$baseline"} ${commit:+--commit "$commit"}
# every log in one file, the kernel benchmarks' JSON in another (at most 8 files come back from $OUT)
for f in "$WORK"/*.log; do echo "===== $(basename "$f")"; cat "$f"; done >"$OUT/logs.txt"
if compgen -G "$WORK/*_bench.json" >/dev/null; then
  python3 -c 'import json, pathlib, sys; print(json.dumps({pathlib.Path(p).stem: json.loads(pathlib.Path(p).read_text()) for p in sys.argv[1:]}, indent=1))' \
    "$WORK"/*_bench.json >"$OUT/kernel_benchmarks.json"
fi
failed=$(cat "$WORK"/*.rc 2>/dev/null | grep -cv '^0$')
broken=$(grep -l '^{"error"' "$WORK"/*.[ab].*.json 2>/dev/null | wc -l)
echo "[${SECONDS}s] done; $failed test suite(s) failed, $broken benchmark run(s) without results"
exit $(( failed + broken > 0 ))
