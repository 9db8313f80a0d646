#!/usr/bin/env bash
# Sixth session's verification call (H200): gpu_verify_final.sh on main after the rotary pre-wait loads and the
# native_attention split, with PDL off as the one A/B. Caller sets PYTHONPATH / REVOLTA_NATIVE_LIB.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
T_KTEST=200 AWQ_AB="REVOLTA_PDL=0" bash "$ROOT/scripts/gpu_verify_final.sh"
