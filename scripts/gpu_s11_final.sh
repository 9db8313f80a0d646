#!/usr/bin/env bash
# Eleventh session, run 3 (H200): main's library (HEAD, unchanged kernels since session 10's last commit) through
# gpu_verify_final.sh without the kernel and GEMV benchmarks (run 1 measured quant_bench and gemv_bench on the same
# GEMV code): every kernel and engine GPU test, fp16 and AWQ Llama-3.1-8B batch 1 in one run, AWQ again (a switch
# set to its default), the decode timeline, the hybrid MoE model. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
T_KTEST=200 T_ETEST=170 T_KBENCH=1 T_GEMV=1 T_MOE=100 AWQ_AB="REVOLTA_FUSED_QKV_ROPE=1" \
  exec bash "$(dirname "$0")/gpu_verify_final.sh"
