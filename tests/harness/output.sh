#!/usr/bin/env bash
# tests/harness/output.sh HARNESS CASE: the harness keeps its results.
# Registered by tests/harness/harness.cmake, one ctest per case (harness/output_CASE).
#
#   interrupt_int   SIGINT once the first run finished: exit 130; the JSON
#                   holds that run, "complete": false, "interrupted" names
#                   the signal and the run cut short; the CSV beside it
#   interrupt_term  the same with SIGTERM: exit 143
#   complete        an uninterrupted run: "complete": true
#   json_write_error  the JSON cannot be written (RLIMIT_FSIZE: EFBIG, as a
#                   full disk gives ENOSPC): exit 1 with a message, the
#                   previous file untouched, no temporary file left
#   not_regular     --json naming a FIFO: exit 2, the FIFO still there
#                   (the rename that replaces the file must never replace
#                   a device or a pipe)
#   stdout_full     stdout is /dev/full: exit 1, "No space left on device"
#   stdout_closed   stdout closed: exit 1 with a message
#   seed_max        --seed=18446744073709551615 is recorded as that number
#                   (a string of digits) and accepted back
#   short_option    -xy names '-x', not the program's path
#
# The interrupt cases wait on state (the JSON file showing the first run
# finished), never on a sleep.
set -uo pipefail
harness=${1:?usage: harness_output.sh HARNESS CASE}
case=${2:?usage: harness_output.sh HARNESS CASE}
py=/usr/bin/python3
dir=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL [$case]: $*" >&2; exit 1; }
# json FILE EXPR: print EXPR evaluated on the parsed document `d`.
json() { "$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# A previous run's complete file, which the next run must only ever replace
# whole.
previous() {
  cat > "$1" <<'EOF'
{"context": {}, "complete": true, "benchmarks": [], "rows": [],
 "runs": [{"scenario": "a"}, {"scenario": "b"}, {"scenario": "c"},
          {"scenario": "d"}, {"scenario": "e"}, {"scenario": "f"}],
 "violations": [], "targets": []}
EOF
}

interrupt() {
  local sig=$1 want=$2 f=$dir/r.json
  previous "$f"
  # smoke takes seconds, sustain 60 s: the signal lands inside sustain.
  # A background job of a script starts with SIGINT ignored, which the
  # harness respects: give it the default action, as a terminal's job has.
  env --default-signal=INT,TERM "$harness" --impl=wheel --scenario=smoke,sustain --json="$f" >"$dir/out" 2>&1 &
  pid=$!
  local n=0
  until [ "$(json "$f" 'len(d["runs"])' 2>/dev/null)" = 1 ]; do
    kill -0 "$pid" 2>/dev/null || fail "the harness exited before its first run finished"
    n=$((n + 1))
    [ "$n" -lt 1200 ] || fail "no run finished in 120 s"
    sleep 0.1
  done
  kill -"$sig" "$pid"
  wait "$pid"
  local rc=$?
  pid=
  cat "$dir/out"
  [ "$rc" -eq "$want" ] || fail "exit status $rc, want $want"
  [ "$(json "$f" 'd["complete"]')" = False ] || fail '"complete" is not false'
  [ "$(json "$f" '[r["scenario"] + "/" + r["status"] for r in d["runs"]]')" = "['smoke/ok']" ] ||
    fail "runs: $(json "$f" 'd["runs"]')"
  [ "$(json "$f" 'd["interrupted"]')" = "{'signal': 'SIG$sig', 'scenario': 'sustain', 'engine': 'wheel'}" ] ||
    fail "interrupted: $(json "$f" 'd.get("interrupted")')"
  # Only the finished run's rows: none of sustain's samples.
  [ "$(json "$f" 'sorted({r["scenario"] for r in d["rows"]})')" = "['smoke']" ] ||
    fail "rows of the interrupted run were written"
  grep -q '^smoke,wheel,violations,' "$dir/r.csv" || fail "the CSV lacks the finished run"
  ! grep -q '^sustain' "$dir/r.csv" || fail "the CSV has the interrupted run's rows"
  grep -q "SIG$sig: writing the 1 finished runs" "$dir/out" || fail "no message"
  [ -z "$(ls "$dir" | grep '\.tmp')" ] || fail "temporary files left: $(ls "$dir")"
}

case $case in
interrupt_int) interrupt INT 130 ;;
interrupt_term) interrupt TERM 143 ;;
complete)
  "$harness" --impl=wheel --json="$dir/r.json" >/dev/null || fail "exit $?"
  [ "$(json "$dir/r.json" 'd["complete"]')" = True ] || fail '"complete" is not true'
  [ "$(json "$dir/r.json" '"interrupted" in d')" = False ] || fail '"interrupted" in a complete run'
  ;;
json_write_error)
  previous "$dir/r.json"
  cp "$dir/r.json" "$dir/before.json"
  # A file size limit of 1 block: the first write past it fails with EFBIG
  # (SIGXFSZ ignored), as a full disk fails with ENOSPC.
  (trap '' XFSZ; ulimit -f 1; exec "$harness" --impl=wheel --json="$dir/r.json") >"$dir/out" 2>&1
  rc=$?
  cat "$dir/out"
  [ "$rc" -eq 1 ] || fail "exit status $rc, want 1"
  grep -q "cannot write $dir/r.json: File too large" "$dir/out" || fail "no message naming the file and the error"
  cmp -s "$dir/r.json" "$dir/before.json" || fail "the previous file was changed"
  [ -z "$(ls "$dir" | grep '\.tmp')" ] || fail "temporary files left: $(ls "$dir")"
  ;;
not_regular)
  mkfifo "$dir/fifo"
  "$harness" --impl=wheel --json="$dir/fifo" >"$dir/out" 2>&1
  rc=$?
  cat "$dir/out"
  [ "$rc" -eq 2 ] || fail "exit status $rc, want 2"
  [ -p "$dir/fifo" ] || fail "the FIFO was replaced"
  grep -q "not a regular file" "$dir/out" || fail "no message"
  ;;
stdout_full)
  "$harness" --impl=wheel >/dev/full 2>"$dir/err"
  rc=$?
  cat "$dir/err"
  [ "$rc" -eq 1 ] || fail "exit status $rc, want 1"
  grep -q "write error on standard output: No space left on device" "$dir/err" || fail "no message"
  ;;
stdout_closed)
  "$harness" --impl=wheel >&- 2>"$dir/err"
  rc=$?
  cat "$dir/err"
  [ "$rc" -eq 1 ] || fail "exit status $rc, want 1"
  grep -q "standard output is closed" "$dir/err" || fail "no message"
  ;;
seed_max)
  max=18446744073709551615
  "$harness" --impl=wheel --seed=$max --json="$dir/a.json" >/dev/null || fail "--seed=$max: exit $?"
  got=$(json "$dir/a.json" 'd["context"]["tmo"]["seed"]')
  [ "$got" = $max ] || fail "recorded seed '$got', want $max"
  "$harness" --impl=wheel --seed="$got" --json="$dir/b.json" >/dev/null || fail "--seed=$got refused back: exit $?"
  [ "$(json "$dir/b.json" 'd["context"]["tmo"]["seed"]')" = $max ] || fail "second record differs"
  "$harness" --seed=18446744073709551616 >/dev/null 2>&1
  [ $? -eq 2 ] || fail "--seed=2^64 not refused with exit 2"
  ;;
short_option)
  "$harness" -xy >/dev/null 2>"$dir/err"
  rc=$?
  cat "$dir/err"
  [ "$rc" -eq 2 ] || fail "exit status $rc, want 2"
  grep -q "unknown option '-x'" "$dir/err" || fail "the bad option is not named"
  ! grep -qF "$harness" "$dir/err" || fail "the message names the program's path"
  ;;
*) fail "unknown case" ;;
esac
echo "ok [$case]"
