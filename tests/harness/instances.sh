#!/usr/bin/env bash
# --repeat=N runs each instance in a process of its own
# (scenarios/kit/instance.c):
#   tests/harness/instances.sh HARNESS ABORT.so UNAVAIL.so
#  1. wheel, --repeat=2: every benchmark entry is tagged with its instance
#     (0 and 1) and a process of its own (two pids, neither the harness's);
#     the rows carry the instances' min and max; no temporary file is left.
#  2. ABORT.so (its create aborts): each instance's process dies; each is a
#     violation naming signal 6, in the JSON, and the harness exits 1.
#  3. UNAVAIL.so (its create answers TMO_EUNAVAIL): skipped through its
#     instance with the reason named, exit 77.
set -u
h=${1:?usage: instances.sh HARNESS ABORT.so UNAVAIL.so} abort_so=${2:?} unavail_so=${3:?}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/tmp"
fail() { echo "FAIL: $*"; tail -n 40 "$dir/out" 2>/dev/null; exit 1; }
run() { TMPDIR="$dir/tmp" TMO_TEST_SCALE=0.01 "$h" --scenario=throughput --quick --repeat=2 "$@" \
          >"$dir/out" 2>&1; }

run --impl=wheel --json="$dir/w.json" & pid=$!
wait $pid || fail "wheel --repeat=2 exited $?"
/usr/bin/python3 - "$dir/w.json" "$pid" <<'PY' || fail "the instances' entries are not as they should be"
import json, sys
d = json.load(open(sys.argv[1]))
by = {}
for b in d["benchmarks"]:
    by.setdefault(b.get("tmo_instance"), set()).add(b.get("tmo_pid"))
print("instances and their processes:", {k: sorted(v) for k, v in by.items()})
pids = [p for v in by.values() for p in v]
ok = (sorted(by) == [0, 1] and all(len(v) == 1 for v in by.values())
      and len(set(pids)) == 2 and int(sys.argv[2]) not in pids)
stats = {r["param"].split("stat=")[-1] for r in d["rows"]
         if r["metric"] == "seed_median_ns_per_op" and r["engine"] == "wheel"}
print("seed_median_ns_per_op rows:", sorted(stats))
sys.exit(0 if ok and {"min", "max"} <= stats and not d["violations"] else 1)
PY
[ -z "$(ls -A "$dir/tmp")" ] || fail "left behind: $(ls "$dir/tmp")"

run --impl="$abort_so" --json="$dir/a.json"
rc=$?
[ $rc -eq 1 ] || fail "an engine whose instances die: exit $rc, want 1"
n=$(grep -cE "VIOLATION .*instance [12] \(process [0-9]+\) ended with killed by signal 6" "$dir/out")
[ "$n" -eq 2 ] || fail "$n of 2 dead instances named as violations"
/usr/bin/python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))["violations"]; print(len(v), "violations in the JSON"); sys.exit(0 if len(v) == 2 and all("signal 6" in x["message"] for x in v) else 1)' "$dir/a.json" ||
  fail "the JSON does not hold the two violations"
[ -z "$(ls -A "$dir/tmp")" ] || fail "left behind: $(ls "$dir/tmp")"

run --impl="$unavail_so"
rc=$?
[ $rc -eq 77 ] || fail "an unavailable engine through its instances: exit $rc, want 77"
grep -q "^SKIPPED \[throughput/bad\].*TMO_EUNAVAIL" "$dir/out" || fail "no SKIPPED line naming TMO_EUNAVAIL"
echo "ok: instances in processes of their own, merged and tagged; a dead one is a violation"
