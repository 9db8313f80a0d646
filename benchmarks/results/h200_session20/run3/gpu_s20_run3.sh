#!/usr/bin/env bash
# Session 20, run 3 (H200): every kernel and engine GPU test with the library of main's sources (s20, 691f5d9's
# kernels, which are main's after the run-2 revert).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs/s20 && xz -dc .devcarry/s20.so.xz > /tmp/libs/s20/librevolta_native.so
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/s20/librevolta_native.so
device_init
gpu_tests kernel_gpu_tests 400 packages/revolta-kernels/tests
gpu_tests engine_gpu_tests 300 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
echo "[${SECONDS}s] done"
