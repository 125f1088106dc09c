#!/usr/bin/env bash
# refused.sh NAME ERROR CMD...: CMD must exit 3 and print ERROR (a
# TMO_LOAD_* name) on standard error: the named refusal of a file that is
# no engine.
set -uo pipefail
name=$1 want=$2
shift 2
err=$("$@" 2>&1 >/dev/null)
rc=$?
echo "$err"
[ $rc -eq 3 ] || { echo "refused.sh: $name: exit $rc, want 3" >&2; exit 1; }
grep -q -- "$want" <<<"$err" || { echo "refused.sh: $name: no $want in the message" >&2; exit 1; }
echo "refused.sh: $name: exit 3, $want"
