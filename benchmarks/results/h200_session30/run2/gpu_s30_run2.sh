#!/usr/bin/env bash
# Session 30, run 2 (one GPU): the quantized MoE kernel's second version (32 columns per block, loads in flight before
# the input is staged, dequantizing without int-to-float conversions), library m30, against session 29's (m29q):
# its GPU tests, the engine test, quant_moe_bench.py with each library, Qwen3.5-35B-A3B AWQ batch-1 decode, and
# where that step's time goes (decode_timeline.py) for the AWQ and the fp16 checkpoint shapes.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m29q m30
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export REVOLTA_NATIVE_LIB=/tmp/libs/m30/librevolta_native.so
gpu_tests quant_moe 60 packages/revolta-kernels/tests/test_quant_moe_gpu.py
gpu_tests engine_moe 90 packages/revolta-engine/tests/test_gpu_quant_hybrid.py -k experts
for lib in m29q m30; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$lib/librevolta_native.so timeout 60 python3 benchmarks/quant_moe_bench.py \
    --out /tmp/v/quant_moe_bench_$lib.json >/tmp/v/quant_moe_bench_$lib.log 2>&1
  echo "[${SECONDS}s] quant_moe_bench $lib rc=$?"; grep -v Warning /tmp/v/quant_moe_bench_$lib.log | tail -10
done
timeout 110 python3 benchmarks/hybrid_e2e.py --config benchmarks/configs/qwen3.5-35b-a3b-awq \
  --out /tmp/v/hybrid_35b_awq.json >/tmp/v/hybrid_35b_awq.log 2>&1
echo "[${SECONDS}s] hybrid 35B-A3B AWQ rc=$?"; grep -E "tok_s|fraction|cuda_graphs|roofline" /tmp/v/hybrid_35b_awq.json \
  || grep -v Warning /tmp/v/hybrid_35b_awq.log | tail -8
for cfg in qwen3.5-35b-a3b-awq qwen3.5-35b-a3b; do
  timeout 100 python3 benchmarks/decode_timeline.py --config benchmarks/configs/$cfg --prompt-len 1024 \
    --out /tmp/v/timeline_$cfg.json >/tmp/v/timeline_$cfg.log 2>&1
  echo "[${SECONDS}s] timeline $cfg rc=$?"; grep -v Warning /tmp/v/timeline_$cfg.log | grep -v "^    +" | tail -16
done
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
