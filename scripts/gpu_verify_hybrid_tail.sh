#!/usr/bin/env bash
# On the GPU machine, after merging hybrid3: the hybrid/attention kernel GPU tests, all engine GPU tests and
# the Qwen3.5-35B-A3B-shaped batch-1 benchmark. Expects REVOLTA_NATIVE_LIB, PYTHONPATH and OUT set.
set -uo pipefail
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu"
timeout 60 $PYTEST packages/revolta-kernels/tests/test_hybrid_gpu.py packages/revolta-kernels/tests/test_moe_gpu.py packages/revolta-kernels/tests/test_native_gpu.py packages/revolta-kernels/tests/test_attention_gpu.py -k "hybrid or gdn or moe or conv or decode or cache or rotary" --maxfail=20 > $OUT/kernel_tests.log 2>&1
echo "[${SECONDS}s] kernel tests rc=$?"; tail -1 $OUT/kernel_tests.log; grep -E "^(FAILED|ERROR)" $OUT/kernel_tests.log | head
timeout 60 $PYTEST packages/revolta-engine/tests/test_gpu_engine.py packages/revolta-engine/tests/test_gpu_hybrid.py packages/revolta-engine/tests/test_gpu_structured.py packages/revolta-engine/tests/test_linear_fused.py > $OUT/engine_tests.log 2>&1
echo "[${SECONDS}s] engine tests rc=$?"; tail -1 $OUT/engine_tests.log; grep -E "^(FAILED|ERROR)" $OUT/engine_tests.log | head
timeout 70 python3 benchmarks/hybrid_e2e.py --out $OUT/hybrid_e2e.json > $OUT/hybrid_e2e.log 2>&1
echo "[${SECONDS}s] hybrid e2e rc=$?"
python3 -c "
import json; d=json.load(open('$OUT/hybrid_e2e.json')); print({k: v for k, v in d.items() if not isinstance(v, (list, dict))})" || tail -5 $OUT/hybrid_e2e.log
