#!/usr/bin/env bash
# Session 19, run 4 (H200): does a PDL chain pay for switching kernel code between links? benchmarks/code_switch_ab.py
# with main's library (pure A / pure B chains against A-B alternating ones).
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs/main && xz -dc .devcarry/main.so.xz > /tmp/libs/main/librevolta_native.so
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/main/librevolta_native.so
device_init
cd benchmarks
timeout 240 python3 code_switch_ab.py --out "$OUT/code_switch.json" 2>&1 | grep -v Warning
echo "[${SECONDS}s] code_switch_ab rc=$?"
