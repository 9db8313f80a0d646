#!/usr/bin/env bash
# Session 26, run 3 (one H200): the GPU tests of this session's code (MTP speculation, the pinned CPU tier),
# the structured-output tests with the xgrammar wheel carried, the KV offload benchmark again, the file-tier
# probe (page cache dropped and not), and the MTP step cost on the Qwen3.5-27B shape (dummy weights).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
device_init
device_libs m24
export REVOLTA_NATIVE_LIB=/tmp/libs/m24/librevolta_native.so
gpu_tests spec 150 packages/revolta-engine/tests/test_gpu_speculative.py
gpu_tests offload 90 packages/revolta-offload/tests/test_gpu_offload.py
gpu_tests structured 90 packages/revolta-engine/tests/test_gpu_structured.py
timeout 100 python3 benchmarks/kv_offload_bench.py --config benchmarks/configs/llama-3.1-8b --prompt-len 8192 \
  --dir /tmp/kv_8192 --out "$OUT/kv_offload_8192.json" > /tmp/v/kv_offload.log 2>&1
echo "[${SECONDS}s] kv_offload_bench rc=$?"; cat "$OUT/kv_offload_8192.json" 2>/dev/null || tail -20 /tmp/v/kv_offload.log
rm -rf /tmp/kv_8192
timeout 60 python3 benchmarks/kv_disk_probe.py --blocks 512 --dir /tmp/kvp_warm --out /tmp/v/disk_warm.json > /tmp/v/disk_warm.log 2>&1
echo "[${SECONDS}s] disk probe warm rc=$?"; cat /tmp/v/disk_warm.json
timeout 60 python3 benchmarks/kv_disk_probe.py --blocks 512 --dir /tmp/kvp_cold --drop-caches --out /tmp/v/disk_cold.json > /tmp/v/disk_cold.log 2>&1
echo "[${SECONDS}s] disk probe cold rc=$?"; cat /tmp/v/disk_cold.json
rm -rf /tmp/kvp_warm /tmp/kvp_cold
(cd benchmarks && timeout 200 python3 mtp_bench.py --config configs/qwen3.5-27b --k 1,3 --out "$OUT/mtp_27b.json" > /tmp/v/mtp.log 2>&1)
echo "[${SECONDS}s] mtp_bench rc=$?"; cat "$OUT/mtp_27b.json" 2>/dev/null || tail -20 /tmp/v/mtp.log
pack_logs
echo "[${SECONDS}s] done"
