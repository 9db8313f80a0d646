#!/usr/bin/env bash
# Tenth session, run 4 (H200): main's library at the end of the session - gpu_s9_verify.sh (the quantized GEMM/GEMV
# benchmark, then gpu_verify_final.sh: every kernel and engine GPU test, fp16 and AWQ Llama-3.1-8B end to end in one
# run, the hybrid MoE model), with longer test limits and AWQ batch 1 again by default and with each of this
# session's two changes turned off. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
T_KTEST=200 T_ETEST=170 AWQ_AB="REVOLTA_DECODE_LIGHT_WIDE=2 REVOLTA_DECODE_LIGHT_WIDE=0 REVOLTA_FUSED_QKV_ROPE=0" \
  exec bash "$(dirname "$0")/gpu_s9_verify.sh"
