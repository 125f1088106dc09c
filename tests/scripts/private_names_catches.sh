#!/usr/bin/env bash
# tests/scripts/private_names_catches.sh ROOT DIR CC AR NM ARCHIVE HEADER...:
# scripts/private-names must name a leaked global planted in a copy of the
# library, and only it: the copy at DIR gets one object defining
#   lf_planted          a private name without the prefix      -> named
#   tmo_planted_public  tmo_, but no installed header declares  -> named
#   tmo__planted_ok     private, prefixed                       -> not named
#   planted_static      static                                  -> not named
#   tmo_planted_comment tmo_, a header comment names it         -> named
# and, with a scratch header declaring tmo_planted_public (and naming
# tmo_planted_comment in a comment) added to the headers, the first is no
# longer named and the second still is (the public set is what the
# headers' code declares, not a prefix, not their prose).
set -euo pipefail
root=$1 dir=$2 cc=$3 ar=$4 nm=$5 archive=$6
shift 6
rm -rf "$dir" && mkdir -p "$dir"
cat > "$dir/planted.c" <<'C'
int lf_planted(void) { return 1; }
int tmo_planted_public = 2;
int tmo_planted_comment = 5;
int tmo__planted_ok(void) { return 3; }
static int planted_static(void) { return 4; }
int (*tmo__planted_keep)(void) = planted_static;
C
printf '/* tmo_planted_comment is no declaration */\nint tmo_planted_public;\n' > "$dir/planted.h"
"$cc" -c "$dir/planted.c" -o "$dir/planted.o"
cp "$archive" "$dir/libtmo.a"
"$ar" r "$dir/libtmo.a" "$dir/planted.o" 2>/dev/null
fail() { echo "private_names_catches: $1" >&2; exit 1; }
check() { /usr/bin/python3 "$root/scripts/private-names" --nm "$nm" "$@"; }

set +e
out=$(check "$dir/libtmo.a" "$@")
rc=$?
set -e
echo "$out" | grep planted
[ "$rc" -eq 1 ] || fail "exit status $rc with planted leaks, wanted 1"
grep -q '^private lf_planted (planted.o)' <<<"$out" || fail "lf_planted not named"
grep -q '^private tmo_planted_public (planted.o)' <<<"$out" || fail "undeclared tmo_planted_public not named"
! grep -q 'tmo__planted_ok\|planted_static\|tmo__planted_keep' <<<"$out" || fail "a private or static name was named"

set +e
out=$(check "$dir/libtmo.a" "$@" "$dir/planted.h")
set -e
grep -q '^private lf_planted ' <<<"$out" || fail "lf_planted not named with the scratch header"
! grep -q 'tmo_planted_public' <<<"$out" || fail "tmo_planted_public named although a header declares it"
grep -q '^private tmo_planted_comment ' <<<"$out" || fail "a name in a header comment passed as declared"

# Vacuous input is refused: an archive of the planted object alone defines
# nothing the headers declare.
rm -f "$dir/only.a" && "$ar" r "$dir/only.a" "$dir/planted.o" 2>/dev/null
set +e
check "$dir/only.a" "$@" >/dev/null 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "an archive with no public symbol gave $rc, wanted 2"
echo "private_names_catches: planted leaks named, private and static ones not"
