#!/usr/bin/env bash
# Session 29, run 2 (one GPU; NOT RUN in session 29: the device time was spent on machines that did not start): the grouped quantized MoE experts (revolta::quant_moe_matmul, csrc/quant_moe.cuh)
# against the reference and in the engine (CUDA graphs now captured for quantized MoE checkpoints), its speed as a
# fraction of copy bandwidth, Qwen3.5-35B-A3B AWQ batch-1 decode. Library m29q: this tree's kernels for sm_90,
# carried in .devcarry.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m29q
export REVOLTA_NATIVE_LIB=/tmp/libs/m29q/librevolta_native.so
export REVOLTA_QUANT_MOE_GROUPED=1  # off by default until these tests pass
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
gpu_tests quant_moe 60 packages/revolta-kernels/tests/test_quant_moe_gpu.py
gpu_tests engine_moe 90 packages/revolta-engine/tests/test_gpu_quant_hybrid.py -k experts
timeout 110 python3 benchmarks/hybrid_e2e.py --config benchmarks/configs/qwen3.5-35b-a3b-awq \
  --out /tmp/v/hybrid_35b_awq.json >/tmp/v/hybrid_35b_awq.log 2>&1
echo "[${SECONDS}s] hybrid 35B-A3B AWQ rc=$?"; grep -E "tok_s|fraction|cuda_graphs|roofline|gpu\"|CUDA graphs" /tmp/v/hybrid_35b_awq.json \
  || grep -v Warning /tmp/v/hybrid_35b_awq.log | tail -8
timeout 60 python3 benchmarks/quant_moe_bench.py --out /tmp/v/quant_moe_bench.json >/tmp/v/quant_moe_bench.log 2>&1
echo "[${SECONDS}s] quant_moe_bench rc=$?"; cat /tmp/v/quant_moe_bench.log | grep -v Warning | tail -12
python3 scripts/merge_results.py "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
