#!/usr/bin/env bash
# skewed.sh RC PATTERN CMD...: CMD (the harness running expiry on one of the
# example's skewed variants) must exit RC and print a line matching PATTERN
# (grep -E): the silent variant fails on order, the counting one passes
# with its inversions reported as guarantee 4's named limit.
set -uo pipefail
want_rc=$1 want=$2
shift 2
out=$("$@" 2>&1)
rc=$?
echo "$out" | grep -E "order|VIOLATION|spread" | head -20
[ $rc -eq "$want_rc" ] || { echo "skewed.sh: exit $rc, want $want_rc" >&2; exit 1; }
grep -Eq -- "$want" <<<"$out" || { echo "skewed.sh: no line matches: $want" >&2; exit 1; }
echo "skewed.sh: exit $rc and: $want"
