#!/usr/bin/env bash
# unavail.sh HARNESS ENGINE.so: ENGINE.so loads, but its create answers
# TMO_EUNAVAIL.  Every scenario (--scenario=all --quick) must skip it, each
# with a SKIPPED line that names TMO_EUNAVAIL, and the harness exit 77
# (every run skipped): a facility missing on this machine is no failure.
set -uo pipefail
harness=$1 so=$2
out=$("$harness" --impl="$so" --scenario=all --quick 2>&1)
rc=$?
scenarios=$("$harness" --list | awk '/^scenarios/ {on = 1; next} on && /^  [a-z]/ {n++} END {print n}')
skipped=$(grep -c '^SKIPPED \[.*TMO_EUNAVAIL' <<<"$out")
grep -E '^SKIPPED|could not run|^FAILED|every run skipped' <<<"$out"
[ "$scenarios" -gt 0 ] || { echo "unavail.sh: no scenarios listed" >&2; exit 1; }
[ "$skipped" -eq "$scenarios" ] ||
  { echo "unavail.sh: $skipped of $scenarios scenarios skipped naming TMO_EUNAVAIL" >&2; exit 1; }
[ $rc -eq 77 ] || { echo "unavail.sh: exit $rc, want 77 (every run skipped)" >&2; exit 1; }
echo "unavail.sh: all $scenarios scenarios skipped, naming TMO_EUNAVAIL; exit 77"
