#!/usr/bin/env bash
# Session 21, run 4 (H200): the streaming load policy for the MoE kernels' expert and router weights
# (Pack8::stream). w3 = main at 486e977 (run 2's default library); wm = main + the MoE change, built with the default
# flags. MoE and hybrid GPU tests on wm; Qwen3.5-35B-A3B-shaped fp16 batch 1 (hybrid_e2e.py), interleaved; Llama AWQ
# batch 1 on both (wm must equal w3 there: the GEMV and attention code is the same).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
for v in w3 wm; do mkdir -p /tmp/libs/$v && xz -dc .devcarry/$v.so.xz > /tmp/libs/$v/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
for v in w3 wm; do
  REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so python3 -c "import revolta_kernels as k; print(k.native_status()); assert k.native_available()" || exit 1
done
REVOLTA_NATIVE_LIB=/tmp/libs/wm/librevolta_native.so gpu_tests moe_hybrid_tests_wm 150 \
  packages/revolta-kernels/tests/test_moe_gpu.py packages/revolta-kernels/tests/test_hybrid_gpu.py
for i in 1 2; do
  for v in w3 wm; do
    REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so timeout 90 python3 benchmarks/hybrid_e2e.py \
      --out /tmp/v/hybrid_${v}_$i.json >/tmp/v/hybrid_${v}_$i.log 2>&1
    echo "[${SECONDS}s] hybrid $v $i rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' /tmp/v/hybrid_${v}_$i.json | tr '\n' ' ')"
  done
done
for v in w3 wm; do e2e "awq_$v" benchmarks/configs/llama-3.1-8b-awq REVOLTA_NATIVE_LIB=/tmp/libs/$v/librevolta_native.so; done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
pack_logs
echo "[${SECONDS}s] done"
