#!/bin/sh
# Compiler launcher of the Volta library build (cmake/archs.cmake): runs one nvcc compile and keeps its stderr,
# which holds ptxas -v's registers / spills / shared memory of every kernel, in DIR/<object>.log, showing
# everything but those info lines. Usage: ptxas_log.sh DIR nvcc ARGS...
log_dir=$1
shift
obj=unknown.o
prev=
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then obj=$arg; fi
  prev=$arg
done
mkdir -p "$log_dir"
log="$log_dir/$(basename "$obj").log"
"$@" 2>"$log"
rc=$?
grep -v -e "^ptxas info" -e "^    [0-9]* bytes stack frame" "$log" >&2
exit $rc
