#!/usr/bin/env bash
# A = main (rotary triggers before its wait), B = also the light decode kernel triggers before its wait. ABAB.
set -uo pipefail
mkdir -p /tmp/v
for lib in A B; do
  REVOLTA_NATIVE_LIB=$PWD/lib$lib.so timeout 120 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu \
    packages/revolta-kernels/tests/test_rope_attention_gpu.py packages/revolta-kernels/tests/test_native_gpu.py -k "decode or light or graph or rotary" \
    > $OUT/tests_$lib.log 2>&1; echo "tests $lib rc=$?"; tail -1 $OUT/tests_$lib.log
done
for round in 1 2; do for lib in A B; do
  REVOLTA_NATIVE_LIB=$PWD/lib$lib.so timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b-awq --decode-only \
    --concurrency 1 --prefill-len 1024 --out $OUT/awq_${lib}_$round.json > /tmp/v/awq_${lib}_$round.log 2>&1
  echo "awq $lib round $round rc=$?"; grep -E '"batch1_(decode_tok_s|fraction_of_roofline)"' $OUT/awq_${lib}_$round.json
done; done
for lib in A B; do
  REVOLTA_NATIVE_LIB=$PWD/lib$lib.so timeout 60 python3 benchmarks/gpu_e2e.py --config benchmarks/configs/llama-3.1-8b --decode-only \
    --concurrency 1 --prefill-len 1024 --out $OUT/fp16_$lib.json > /tmp/v/fp16_$lib.log 2>&1
  echo "fp16 $lib rc=$?"; grep -E '"batch1_(decode_tok_s|fraction_of_roofline)"' $OUT/fp16_$lib.json
done
REVOLTA_NATIVE_LIB=$PWD/libB.so timeout 80 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
  --out $OUT/timeline_B.json > /tmp/v/tl.log 2>&1; grep -E "tok/s|on the path" /tmp/v/tl.log | head -7
