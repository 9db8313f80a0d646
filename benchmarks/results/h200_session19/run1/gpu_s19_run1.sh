#!/usr/bin/env bash
# Session 19, run 1 (H200), three libraries carried xz-compressed in .devcarry:
#   main   = main 3a15d6d (its last two commits were not run on a GPU before): every GPU test, issue 6's figures;
#   inline = ede4e7d (act-order gather inline in the plain split-K kernel: 475 tok/s in session 18 run 3, against
#            450 for main's separate kernel in run 5): act-order batch 1 and decode timeline against main's;
#   pf     = main + kGemvFlagPrefetchAfterWait (flag 16: the split-K kernel's L2 prefetch issued after the PDL
#            wait, while x is staged): AWQ batch 1 and quant_bench under budgets of 4-32 MB against the default.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs
for l in main inline pf; do mkdir -p /tmp/libs/$l && xz -dc .devcarry/$l.so.xz > /tmp/libs/$l/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
export REVOLTA_NATIVE_LIB=/tmp/libs/main/librevolta_native.so
device_init
gpu_tests kernel_gpu_tests 120 packages/revolta-kernels/tests
gpu_tests engine_gpu_tests 100 $(grep -l 'pytest.mark.gpu' packages/revolta-engine/tests/test_*.py)
for act in false true; do
  mkdir -p "/tmp/v/gptq_$act"
  python3 - "$act" <<'PY'
import json, sys
act = sys.argv[1] == "true"
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False,
                              "desc_act": act, "checkpoint_format": "gptq"}
json.dump(cfg, open(f"/tmp/v/gptq_{sys.argv[1]}/config.json", "w"), indent=2)
PY
done
with_lib() {  # with_lib main|inline|pf TUNE CMD...: run CMD with that library (and inline: its Python sources)
  local pp=$PYTHONPATH which=$1 tune=$2
  shift 2
  [ "$which" = inline ] && pp=$ROOT/.devcarry/inline/src/packages/revolta-kernels/src:$ROOT/.devcarry/inline/src/packages/revolta-engine/src:$PYTHONPATH
  PYTHONPATH=$pp REVOLTA_NATIVE_LIB=/tmp/libs/$which/librevolta_native.so REVOLTA_QUANT_TUNE=$tune "$@"
}
e2e() {  # e2e LABEL LIB TUNE CONFIG
  with_lib "$2" "$3" timeout 60 python3 benchmarks/gpu_e2e.py --config "$4" --decode-only \
    --concurrency 1 --prefill-len 1024 --out "/tmp/v/e2e_$1.json" >"/tmp/v/e2e_$1.log" 2>&1
  echo "[${SECONDS}s] $1 rc=$? $(grep -hoE '"batch1_(decode_tok_s|fraction_of_roofline)": [0-9.]+' "/tmp/v/e2e_$1.json" | tr '\n' ' ')"
}
DEF=""
pf() { echo "0,0,1,-1,-1,$1,0,0,-1,22"; }  # prefetch KB after the wait, default flags 2 | 4 plus 16
e2e fp16 main "$DEF" benchmarks/configs/llama-3.1-8b
for i in 1 2; do
  e2e "awq_main_$i" main "$DEF" benchmarks/configs/llama-3.1-8b-awq
  e2e "awq_pf8192_$i" pf "$(pf 8192)" benchmarks/configs/llama-3.1-8b-awq
  e2e "actorder_main_$i" main "$DEF" /tmp/v/gptq_true
  e2e "actorder_inline_$i" inline "$DEF" /tmp/v/gptq_true
done
for kb in 4096 16384 32768; do e2e "awq_pf${kb}" pf "$(pf $kb)" benchmarks/configs/llama-3.1-8b-awq; done
e2e awq_pf_default pf "$DEF" benchmarks/configs/llama-3.1-8b-awq
e2e gptq_plain main "$DEF" /tmp/v/gptq_false
for lib in main inline; do
  with_lib $lib "$DEF" timeout 80 python3 benchmarks/decode_timeline.py --config /tmp/v/gptq_true \
    --out /tmp/v/timeline_actorder_$lib.json >"$OUT/timeline_actorder_$lib.log" 2>&1
  echo "[${SECONDS}s] act-order timeline $lib rc=$?"; grep -E "tok/s|on the path" "$OUT/timeline_actorder_$lib.log" | head -7
done
for t in main:$DEF pf:$(pf 8192); do
  lib=${t%%:*}; tune=${t#*:}
  with_lib $lib "$tune" timeout 60 python3 benchmarks/decode_timeline.py --config benchmarks/configs/llama-3.1-8b-awq \
    --out /tmp/v/timeline_awq_$lib.json >"$OUT/timeline_awq_$lib.log" 2>&1
  echo "[${SECONDS}s] AWQ timeline $lib rc=$?"; grep -E "tok/s|on the path" "$OUT/timeline_awq_$lib.log" | head -6
done
with_lib main "$DEF" timeout 100 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench_main.json >"$OUT/quant_bench_main.log" 2>&1
echo "[${SECONDS}s] quant_bench main rc=$?"; grep -vE "^\s*$" "$OUT/quant_bench_main.log" | tail -7
with_lib pf "$(pf 8192)" timeout 100 python3 benchmarks/quant_bench.py --out /tmp/v/quant_bench_pf.json >"$OUT/quant_bench_pf.log" 2>&1
echo "[${SECONDS}s] quant_bench pf 8192 rc=$?"; grep -vE "^\s*$" "$OUT/quant_bench_pf.log" | tail -7
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
