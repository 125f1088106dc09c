#!/usr/bin/env bash
# conform.sh BUILD CC CFLAGS VARIANT [CASE...]
# `cmake --install` BUILD into a scratch prefix, build examples/engine
# against the INSTALLED headers found through the installed tmo.pc (as an
# outside team would), then run scripts/conform on VARIANT (example,
# example-early, example-nowait) with BUILD's binaries.  With no CASE the
# verdict must be a pass; with CASEs conform must fail (exit 1) and name
# every one of them among its failures, so a broken engine that fails for
# some other reason (or a conform that fails everything) does not count.
# The TSan rows run when a TSan build (SOURCE/build/tsan) and clang exist:
# the variant is built again with -fsanitize=thread for them.
set -uo pipefail
build=$1 cc=$2 cflags=$3 variant=$4
shift 4
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null || exit 1
[ -f "$tmp/prefix/include/tmo/engine.h" ] || { echo "install: tmo/engine.h missing" >&2; exit 1; }
pc=$(find "$tmp/prefix" -name tmo.pc)
[ -n "$pc" ] || { echo "install: no tmo.pc" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# The example, copied out of the tree: nothing but the installed files.
cp "$root/examples/engine/example.c" "$root/examples/engine/Makefile" "$tmp/"
make -s -C "$tmp" CC="$cc" CFLAGS="-O2 -g $cflags" O="$tmp" "$tmp/$variant.so" || exit 1
tsan=()
if [ -x "$root/build/tsan/cli/tmo-harness" ] && command -v clang >/dev/null; then
  mkdir -p "$tmp/tsan"
  make -s -C "$tmp" CC=clang CFLAGS="-O1 -g -fsanitize=thread" O="$tmp/tsan" "$tmp/tsan/$variant.so" &&
    tsan=(--tsan-build="$root/build/tsan" --tsan-so="$tmp/tsan/$variant.so")
fi
# A broken variant runs only the cases it must fail (conform --only): the
# whole suite is the example's to pass; these show the same suite catches.
only=()
if [ $# -gt 0 ]; then
  only=("--only=^($(IFS='|'; echo "$*"))\$")
fi
out=$("$root/scripts/conform" --build="$build" --logs="$tmp/logs" ${tsan[@]+"${tsan[@]}"} \
      ${only[@]+"${only[@]}"} "$tmp/$variant.so" 2>/dev/null)
rc=$?
echo "$out"
if [ $# -eq 0 ]; then
  [ $rc -eq 0 ] || { echo "conform.sh: $variant must pass; conform exited $rc" >&2; exit 1; }
  exit 0
fi
[ $rc -eq 1 ] || { echo "conform.sh: $variant must fail (exit 1); conform exited $rc" >&2; exit 1; }
failed=$(printf '%s\n' "$out" | sed -n 's/^conform: FAILED://p')
bad=0
for c in "$@"; do
  if [[ " $failed " != *" $c "* ]]; then
    echo "conform.sh: $variant: expected case $c among the failures (failed:$failed)" >&2
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "conform.sh: $variant failed as it must, caught by: $*"
exit $bad
