#!/usr/bin/env bash
# tests/scripts/shape_catches.sh ROOT DIR: scripts/shape must name each
# kind of violation, planted one each in a scratch git tree at DIR.
set -euo pipefail
root=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir/src/ds" "$dir/src/core" "$dir/src/lf" "$dir/cli" "$dir/impls/a" "$dir/impls/b" "$dir/tests"
cd "$dir"
git init -q .
printf '#include "core/internal.h"\n' > src/ds/up.c          # ds includes core
printf '#include "tmo/scope.h"\n' > src/core/client.c       # core knows its client
printf '#include "b/b.h"\n' > impls/a/other.c               # one engine's part includes another's
printf '/* b */\n' > impls/b/b.h
{ echo 'int long_one(void)'; echo '{'; for i in $(seq 80); do echo '	;'; done; echo '}'; } > cli/long.c
for i in $(seq 501); do echo "/* $i */"; done > cli/big.h
{ echo 'int long_test(void)'; echo '{'; for i in $(seq 200); do echo '	;'; done; echo '}'; } > tests/ok.c
for i in $(seq 501); do echo "/* $i */"; done > tests/big.c
printf 'void tmo__lf_fire(void)\n{\n}\n' > src/lf/fire.c                # the timer thread's
printf '/* tmo__lf_fire in a comment */\nvoid tmo__lf_cal_update(void)\n{\n\ttmo__lf_fire();\n}\n' \
  > src/lf/clock.c                                                           # time uses it
printf 'int tmo__lf_stray;\n' > src/lf/stray.c                              # in no order
printf '/* fire.c */\n' > src/lf/fire.h
printf '#include "fire.h"\nvoid tmo__lf_fire(void);\n' > src/lf/clock.h  # a later header, another's name
printf '/* nobody */\n' > src/lf/stray.h                                   # a header of no place
set +e
out=$(/usr/bin/python3 "$root/scripts/shape" "$dir")
rc=$?
set -e
echo "$out"
fail() { echo "shape_catches: $1" >&2; exit 1; }
[ "$rc" -eq 1 ] || fail "exit status $rc, wanted 1"
grep -q '^layer src/ds/up.c:1: ds includes core/internal.h' <<<"$out" || fail "ds including core not named"
grep -q '^layer src/core/client.c:1: src/core/ includes tmo/scope.h' <<<"$out" || fail "core including scope.h not named"
grep -q '^layer impls/a/other.c:1: ' <<<"$out" || fail "an engine part including another engine's not named"
grep -q '^function cli/long.c:2: long_one is 82 lines' <<<"$out" || fail "82-line function not named"
grep -q '^file cli/big.h: 501 lines' <<<"$out" || fail "501-line file not named"
grep -q '^file tests/big.c: 501 lines' <<<"$out" || fail "501-line file in tests/ not named"
! grep -q 'tests/ok.c' <<<"$out" || fail "a long function in tests/ was named"
grep -q "^order src/lf/clock.c:4: uses tmo__lf_fire of fire.c, which comes after it" <<<"$out" ||
  fail "src/lf/ out of order not named"
grep -q "^order src/lf/stray.c: not in src/lf/'s order" <<<"$out" || fail "a file outside the order not named"
grep -q '^order src/lf/clock.h:1: includes fire.h, the header of fire.c, which comes after it' <<<"$out" ||
  fail "a header including a later one not named"
grep -q '^order src/lf/clock.h:2: declares tmo__lf_fire of fire.c' <<<"$out" ||
  fail "a header declaring another file's name not named"
grep -q "^order src/lf/stray.h: a header of no file in src/lf/'s order" <<<"$out" ||
  fail "a header of no place not named"
grep -q '^shape: 14 files, 11 violations$' <<<"$out" || fail "wrong count"
echo "shape_catches: every planted violation named"
