# Sourced by the device scripts (ROOT = the repository root, OUT = the folder that comes back).
# The GPU tests (`$PYTEST files...`), the project's addopts (which deselect them) replaced.
PYTEST="python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu"

# device_init: /tmp/v for the intermediate files, the repository as the working directory, unbuffered Python, and
# everything the script prints also in $OUT/run.log.
device_init() {
  mkdir -p /tmp/v "$OUT"
  cd "$ROOT" || exit 1
  export PYTHONUNBUFFERED=1
  exec > >(tee "$OUT/run.log") 2>&1
}

# e2e_run FILE SECONDS TITLE CONFIG [NAME=VALUE...]: gpu_e2e.py's batch-1 decode of CONFIG under those environment
# settings (at most SECONDS), into FILE.json and FILE.log; prints TITLE, the rc, tok/s and fraction of the roofline.
e2e_run() {
  local file="$1" secs="$2" title="$3" config="$4"
  shift 4
  env "$@" timeout "$secs" python3 benchmarks/gpu_e2e.py --config "$config" --decode-only --concurrency 1 \
    --prefill-len 1024 --out "$file.json" >"$file.log" 2>&1
  echo "[${SECONDS}s] $title rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "$file.json" | tr '\n' ' ')"
}

# awq_e2e LABEL REVOLTA_QUANT_TUNE: Llama-3.1-8B AWQ batch-1 decode under that launch override ("" = the default),
# into /tmp/v/awq_LABEL.json.
awq_e2e() {
  e2e_run "/tmp/v/awq_$1" 60 "awq $1 ($2)" benchmarks/configs/llama-3.1-8b-awq REVOLTA_QUANT_TUNE="$2"
}

# gpu_tests NAME SECONDS FILE...: those GPU tests into $OUT/NAME.log; prints the rc, the summary and the first failures.
gpu_tests() {
  local name="$1" secs="$2"
  shift 2
  timeout "$secs" $PYTEST "$@" >"$OUT/$name.log" 2>&1
  echo "[${SECONDS}s] GPU tests $name rc=$?"; tail -1 "$OUT/$name.log"; grep -E "^(FAILED|ERROR)" "$OUT/$name.log" | head -10
}

# quant_tests SECONDS: the quantized GEMM/GEMV GPU tests and the engine's fused-norm linear tests, into
# $OUT/tests.log.
quant_tests() {
  gpu_tests tests "$1" packages/revolta-kernels/tests/test_quant_gpu.py packages/revolta-kernels/tests/test_quant_norm_gpu.py \
    packages/revolta-engine/tests/test_linear_quant_norm.py
}

# gptq_config DIR DESC_ACT: Llama-3.1-8B's shape with GPTQ int4 group-128 quantization (desc_act "True" or "False")
# as DIR/config.json, for load_format="dummy" runs.
gptq_config() {
  mkdir -p "$1"
  python3 - "$1" "$2" <<'PY'
import json, sys
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False,
                              "desc_act": sys.argv[2] == "True", "checkpoint_format": "gptq"}
json.dump(cfg, open(f"{sys.argv[1]}/config.json", "w"), indent=2)
PY
}

# e2e LABEL CONFIG [NAME=VALUE...]: e2e_run into /tmp/v/e2e_LABEL.json, at most 90 s.
e2e() {
  local label="$1" config="$2"
  shift 2
  e2e_run "/tmp/v/e2e_$label" 90 "$label" "$config" "$@"
}

# hybrid_run LABEL CONFIG [NAME=VALUE...]: hybrid_e2e.py's batch-1 decode of CONFIG (a hybrid or MoE model) under
# those environment settings (e.g. REVOLTA_NATIVE_LIB=... for an A/B of libraries; at most 100 s), after a prompt of
# $HYBRID_PROMPT_LEN tokens (default: the script's), into /tmp/v/hybrid_LABEL.json and .log; prints the rc, tok/s
# and the CUDA graph's forward time.
hybrid_run() {
  local label="$1" config="$2"
  shift 2
  env "$@" timeout 100 python3 benchmarks/hybrid_e2e.py --config "$config" --out "/tmp/v/hybrid_$label.json" \
    ${HYBRID_PROMPT_LEN:+--prompt-len "$HYBRID_PROMPT_LEN"} >"/tmp/v/hybrid_$label.log" 2>&1
  echo "[${SECONDS}s] hybrid $label rc=$? $(grep -hoE '"(batch1_decode_tok_s[a-z_]*|batch1_fraction_of_roofline|graph_forward_ms|ttft_ms)": [0-9.-]+' \
    "/tmp/v/hybrid_$label.json" 2>/dev/null | tr '\n' ' ')"
}

# pack_logs: every log and JSON under /tmp/v into $OUT/logs.tgz (the device returns at most 8 files).
pack_logs() {
  tar czf "$OUT/logs.tgz" -C /tmp/v . 2>/dev/null
}

# device_libs LIB...: the carried wheels into /tmp/site, each .devcarry/LIB.so.xz unpacked to
# /tmp/libs/LIB/librevolta_native.so, PYTHONPATH set to the wheels and the workspace packages, and every library
# loaded once (exits if one does not load). Call after device_init, so the check is in the log.
device_libs() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$ROOT"/.whl/*.whl >/dev/null 2>&1 || exit 1
  export PYTHONPATH=/tmp/site:$(ls -d "$ROOT"/packages/*/src | tr '\n' ':')
  local v
  for v in "$@"; do
    mkdir -p "/tmp/libs/$v" && xz -dc "$ROOT/.devcarry/$v.so.xz" >"/tmp/libs/$v/librevolta_native.so" || exit 1
    REVOLTA_NATIVE_LIB="/tmp/libs/$v/librevolta_native.so" python3 -c \
      "import revolta_kernels as k; print(k.native_status()); assert k.native_available()" || exit 1
  done
}

# lib LIB: the REVOLTA_NATIVE_LIB setting for device_libs' LIB.
lib() {
  echo "REVOLTA_NATIVE_LIB=/tmp/libs/$1/librevolta_native.so"
}

# ncu_durations CSV: the kernels of an `ncu --metrics gpu__time_duration.sum --csv` capture, us each (those over 5 us),
# and their total (the sessions 36-37 runs wrote this inline).
ncu_durations() {
  python3 - "$1" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
ki, vi = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
vals = [(float(r[vi].replace(",", "")) / 1e3, r[ki][:90]) for r in rows[1:] if r[ki] != "Kernel Name"]
for v, k in vals:
    if v > 5: print(f"  {v:8.1f} us  {k}")
print(f"  {sum(v for v, _ in vals):8.1f} us total ({len(vals)} kernels)")
PY
}

# issue6_bars: issue 6's bars on this machine (the lines sessions 34-38 repeated): Llama-3.1-8B batch 1 fp16 / AWQ /
# AWQ with int8 activations (gpu_e2e.py), then quant_bench.py with fp16 and int8 activations (the M=1 and M=4096
# kernel bars), into /tmp/v; prints each figure.
issue6_bars() {
  e2e fp16 benchmarks/configs/llama-3.1-8b
  e2e awq benchmarks/configs/llama-3.1-8b-awq
  e2e awq_int8 benchmarks/configs/llama-3.1-8b-awq REVOLTA_ACTIVATION_QUANT=int8
  timeout 60 python3 benchmarks/quant_bench.py --out /tmp/v/quant_fp16.json >/tmp/v/qb_fp16.log 2>&1
  echo "[${SECONDS}s] quant_bench fp16 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_fp16.log
  REVOLTA_QUANT_TUNE="0,0,1,-1,-1,-1,0,0,-1,22" timeout 60 python3 benchmarks/quant_bench.py \
    --out /tmp/v/quant_int8.json >/tmp/v/qb_int8.log 2>&1
  echo "[${SECONDS}s] quant_bench int8 rc=$?"; grep -E "copy|M=1" /tmp/v/qb_int8.log
}
