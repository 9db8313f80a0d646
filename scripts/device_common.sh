# Functions gpu_verify.sh sources. ROOT = the repository root, OUT = the folder that comes back from the device,
# WORK = a scratch folder for the logs and JSON files of one run.

# python_env: the wheels carried in .whl/ (those the device image lacks; see shared/device/wheels.sh) installed
# into /tmp/site, and PYTHONPATH set to them, the workspace packages' sources and the tests' shared case builders.
python_env() {
  if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$ROOT"/.whl/*.whl \
      || { echo "installing the carried wheels failed"; return 1; }
  fi
  local src
  src="$(ls -d "$ROOT"/packages/*/src | tr '\n' ':')"
  export PYTHONPATH="/tmp/site:${src}$ROOT/packages/revolta-kernels/tests:$ROOT/packages/revolta-engine/tests"
  export PYTHONUNBUFFERED=1
}

# build_native ARCHS: the native library built with cmake for ARCHS (semicolon-separated, e.g. "90" or "80;90")
# into $BUILD; prints the library's path. The build log is $WORK/build.log.
build_native() {
  local start=$SECONDS
  cmake -S "$ROOT/packages/revolta-kernels" -B "$BUILD" -G Ninja -DREVOLTA_CUDA_ARCHS="$1" \
    -DCMAKE_BUILD_TYPE=Release >"$WORK/build.log" 2>&1 \
    && cmake --build "$BUILD" -j "$(nproc)" >>"$WORK/build.log" 2>&1 \
    || { tail -20 "$WORK/build.log" >&2; return 1; }
  echo "built for sm $1 in $((SECONDS - start)) s" >&2
  echo "$BUILD/librevolta_native.so"
}

# library_at PATH NAME [FILE]: a usable path of the library at PATH (a .so, or a .so.xz from scripts/build_lib.sh
# that is unpacked to /tmp/libs/NAME/FILE, FILE default librevolta_native.so); prints it.
library_at() {
  local file="${3:-librevolta_native.so}"
  case "$1" in
    *.xz) mkdir -p "/tmp/libs/$2" && xz -dc "$1" >"/tmp/libs/$2/$file" || return 1
          echo "/tmp/libs/$2/$file" ;;
    *) realpath "$1" ;;
  esac
}

# check_library PATH: loads the library at PATH and prints the kernels' native status; fails if it does not load.
# Under REVOLTA_EMULATE_ARCH=70 (Volta mode) it must be the Volta library.
check_library() {
  REVOLTA_NATIVE_LIB="$1" python3 -c "import revolta_kernels as k
from revolta_kernels import native, envs
print(k.native_status()); assert k.native_available()
assert native.VOLTA or envs.EMULATE_ARCH.get() is None, 'Volta mode needs the Volta library'"
}

# gpu_tests SUITE SECONDS PATH...: the GPU tests under PATH (the project's addopts, which deselect them, replaced)
# into $WORK/SUITE.log and SUITE.rc; prints the rc and pytest's summary line.
gpu_tests() {
  local suite="$1" secs="$2"
  shift 2
  timeout "$secs" python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu "$@" >"$WORK/$suite.log" 2>&1
  local rc=$?
  echo "$rc" >"$WORK/$suite.rc"
  echo "[${SECONDS}s] GPU tests $suite rc=$rc: $(grep -v "^[[:space:]]*$" "$WORK/$suite.log" | tail -1)"
}

# headline NAME TAG ROUND LIB [ARGS...]: headline benchmark NAME (its command line from
# benchmarks/common/results.py, then ARGS) with the library LIB into $WORK/NAME.TAG.ROUND.json and .log; prints the
# rc and its decode rate.
headline() {
  local name="$1" tag="$2" round="$3" lib="$4" file="$WORK/$1.$2.$3"
  shift 4
  local -a argv
  read -ra argv <<<"$(python3 "$ROOT/benchmarks/common/results.py" argv "$name")"
  argv+=("$@")
  REVOLTA_NATIVE_LIB="$lib" timeout "$BENCH_TIMEOUT" python3 "${argv[@]}" --out "$file.json" >"$file.log" 2>&1
  local rc=$?
  [ -s "$file.json" ] || echo "{\"error\": \"exit status $rc; see $(basename "$file").log in logs.txt\"}" >"$file.json"
  echo "[${SECONDS}s] $name ($tag, round $round) rc=$rc $(grep -hoE '"batch1_decode_tok_s": [0-9.]+' "$file.json" 2>/dev/null)"
}
