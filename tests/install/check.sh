#!/usr/bin/env bash
# install_check.sh BUILD_DIR CC CFLAGS CONSUMER.c
# `cmake --install` into a scratch prefix, then build and run a consumer that
# finds tmo only through the installed tmo.pc.
set -euo pipefail
build=$1 cc=$2 cflags=$3 src=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
for f in tmo/tmo.h tmo/scope.h tmo/wait.h tmo/testing.h tmo/engine.h; do
  [ -f "$tmp/prefix/include/$f" ] || { echo "install: $f missing" >&2; exit 1; }
done
pc=$(find "$tmp/prefix" -name tmo.pc)
[ -n "$pc" ] || { echo "install: no tmo.pc" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# shellcheck disable=SC2086  # CFLAGS is a list of flags
"$cc" $cflags -D_GNU_SOURCE "$src" $(pkg-config --cflags --libs --static tmo) -o "$tmp/consumer"
"$tmp/consumer"
