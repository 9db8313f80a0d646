#!/usr/bin/env bash
# Session 19, run 2 (H200): AWQ and GPTQ act-order decode timelines with main's library against ede4e7d's (the
# split-K kernel compiled with the act-order branch inline), interleaved, twice: which kernels differ per layer.
set -uo pipefail
ROOT="$(pwd)"
source "$ROOT/scripts/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
mkdir -p /tmp/libs
for l in main inline; do mkdir -p /tmp/libs/$l && xz -dc .devcarry/$l.so.xz > /tmp/libs/$l/librevolta_native.so; done
export PYTHONPATH=/tmp/site:$(ls -d $ROOT/packages/*/src | tr '\n' ':')
device_init
mkdir -p /tmp/v/gptq_true
python3 - <<'PY'
import json
cfg = json.load(open("benchmarks/configs/llama-3.1-8b-awq/config.json"))
cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False,
                              "desc_act": True, "checkpoint_format": "gptq"}
json.dump(cfg, open("/tmp/v/gptq_true/config.json", "w"), indent=2)
PY
with_lib() {
  local pp=$PYTHONPATH which=$1
  shift
  [ "$which" = inline ] && pp=$ROOT/.devcarry/inline/src/packages/revolta-kernels/src:$ROOT/.devcarry/inline/src/packages/revolta-engine/src:$PYTHONPATH
  PYTHONPATH=$pp REVOLTA_NATIVE_LIB=/tmp/libs/$which/librevolta_native.so "$@"
}
for i in 1 2; do
  for cfg in awq:benchmarks/configs/llama-3.1-8b-awq actorder:/tmp/v/gptq_true; do
    for lib in main inline; do
      name=${cfg%%:*}_${lib}_$i
      with_lib $lib timeout 60 python3 benchmarks/decode_timeline.py --config ${cfg#*:} --reps 3 \
        --out /tmp/v/timeline_$name.json >/tmp/v/timeline_$name.log 2>&1
      echo "[${SECONDS}s] $name rc=$? $(grep -E 'tok/s' /tmp/v/timeline_$name.log | head -1)"
    done
  done
done
python3 "$ROOT/scripts/merge_results.py" "$OUT/results.json" /tmp/v/*.json
echo "[${SECONDS}s] done"
