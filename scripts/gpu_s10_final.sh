#!/usr/bin/env bash
# Tenth session, run 6 (H200): the final library (run 5's default) through gpu_verify_final.sh without the kernel,
# GEMV and hybrid benchmarks (device time): every kernel and engine GPU test, fp16 and AWQ Llama-3.1-8B batch 1 in
# one run, AWQ again, the decode timeline. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
T_KTEST=200 T_ETEST=170 T_KBENCH=1 T_GEMV=1 T_MOE=1 AWQ_AB="REVOLTA_DECODE_LIGHT_WIDE=2" \
  exec bash "$(dirname "$0")/gpu_verify_final.sh"
