#!/usr/bin/env bash
# starve.sh HARNESS RUNS [ARGS...]: run `HARNESS ARGS` RUNS times beside more
# CPU hogs than CPUs (nproc + 2 spinning shells; TMO_STARVE_HOGS overrides),
# so that an engine's timer thread gets a fraction of a CPU and falls behind
# its arms.  Exits with the first run's status that is not 0 (1: a
# violation; 77: a skip), else 0.  Registered by starve.cmake.
#
# Why: order (guarantee 4) held on a quiet machine and broke when the timer
# thread fell behind (issue 19: mpsc, at 1e6 timers beside CPU hogs).  This
# is the load that shows it.  The planted defect it must catch:
#   cmake --preset release -B build/plant -DCMAKE_C_FLAGS=-DTMO_LF_PLANT_ORDER
#   cmake --build build/plant -j2 --target tmo-harness
#   tests/harness/starve.sh build/plant/cli/tmo-harness 3 --impl=mpsc --scenario=expiry
# (src/lf/timer.c: the round's bound read after the drain, nodes in transit
# not waited for) exits 1 with order violations on some CPUs only (the AMD
# EPYC VM, not the Intel Xeon one); tests/hooked/lf_order.c catches each
# half on every run.
#
# The hogs end however this script does: killed on exit, INT and TERM, and
# each also ends by itself within ~20 ms once this shell is gone (a timeout
# that kills it with SIGKILL leaves no spinner behind).
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 HARNESS RUNS [ARGS...]" >&2
  exit 2
fi
harness=$1 runs=$2
shift 2
hogs=${TMO_STARVE_HOGS:-$(($(nproc) + 2))}
me=$$
pids=()
stop_hogs() {
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  pids=()
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for ((i = 0; i < hogs; i++)); do
  (while kill -0 "$me" 2>/dev/null; do for ((j = 0; j < 20000; j++)); do :; done; done) &
  pids+=($!)
done
echo "starve: $hogs CPU hogs on $(nproc) CPUs; $runs runs of: $harness $*"
for ((k = 1; k <= runs; k++)); do
  "$harness" "$@"
  rc=$?
  echo "starve: run $k of $runs: exit status $rc"
  [ "$rc" -eq 0 ] || exit "$rc"
done
exit 0
