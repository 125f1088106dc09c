#!/usr/bin/env bash
# --benchmark_filter matches the names the console and the JSON show
# ("throughput/<engine>/<case>/threads:N"), scenarios/kit/gbench.h:
#   tests/harness/filter.sh HARNESS
# A filter naming a case with its threads selects that case (engine and
# structure) and nothing else, without "Failed to match" from the runs it
# leaves empty, and prints "-" (not "nan") for the figures it left out; a
# filter that is not a regex is a bad command line (2).
set -u
h=${1:?usage: filter.sh HARNESS}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir/out" 2>/dev/null | tail -n 40; exit 1; }

TMO_TEST_SCALE=0.01 "$h" --impl=wheel --scenario=throughput --quick \
  --benchmark_filter=held/threads:1 --json="$dir/f.json" >"$dir/out" 2>&1 ||
  fail "the filtered run exited $?"
grep -q "Failed to match" "$dir/out" && fail "Google Benchmark was handed a run the filter emptied"
# what the filter left out is "-" in the printout, not "nan"
grep -n -w -i "nan" "$dir/out" && fail "the printout shows nan for figures the filter left out"
/usr/bin/python3 - "$dir/f.json" <<'PY' || fail "the JSON's benchmarks are not the filter's"
import json, sys
names = {b["name"].split("_")[0] for b in json.load(open(sys.argv[1]))["benchmarks"]}
want = {"throughput/wheel/held/threads:1", "throughput/wheel/structure:wheel/held/threads:1"}
print("benchmarks run:", sorted(names))
sys.exit(0 if names == want else 1)
PY
"$h" --impl=wheel --scenario=throughput --quick '--benchmark_filter=(' >"$dir/out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a filter that is not a regex exited $rc, want 2"
grep -q "not a regular expression" "$dir/out" || fail "no reason given for the bad filter"
echo "ok: the filter selects by the names the JSON shows"
