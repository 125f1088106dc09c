#!/usr/bin/env bash
# find_package.sh BUILD_DIR PROJECT_DIR GENERATOR CC CFLAGS LDFLAGS [TOOLCHAIN [EMULATOR...]]
# `cmake --install` into a scratch prefix, then configure, build and run the
# consumer project PROJECT_DIR, which finds tmo only through
# find_package(tmo) (the prefix on CMAKE_PREFIX_PATH, no package registry;
# with a cross TOOLCHAIN also CMAKE_STAGING_PREFIX).
# Then the same build with a broken copy of the prefix whose tmoTargets.cmake lost
# tmo's link interface (the private libraries a static libtmo needs): that
# link must fail, so a config that does not carry them cannot pass.
set -euo pipefail
build=$1 proj=$2 gen=$3 cc=$4 cflags=$5 ldflags=$6 toolchain=${7:-}
shift $(( $# < 7 ? $# : 7 ))
emu=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "find_package: $1" >&2; exit 1; }
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cfg=$(find "$tmp/prefix" -name tmoConfig.cmake)
[ -n "$cfg" ] || fail "no tmoConfig.cmake installed"
[ -f "$(dirname "$cfg")/tmoConfigVersion.cmake" ] || fail "no tmoConfigVersion.cmake installed"
[ -f "$(dirname "$cfg")/tmoTargets.cmake" ] || fail "no tmoTargets.cmake installed"

consumer() { # PREFIX BUILD: configure and build the consumer against PREFIX
  local args=(-S "$proj" -B "$2" -G "$gen" -DCMAKE_BUILD_TYPE=Release
              -DCMAKE_PREFIX_PATH="$1" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
              -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$cflags"
              -DCMAKE_EXE_LINKER_FLAGS="$ldflags")
  # A cross toolchain confines find_package to its find roots (the arm64
  # sysroot): there the scratch prefix is the staging prefix, which CMake
  # searches as it is, not re-rooted.
  [ -z "$toolchain" ] || args+=(-DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_STAGING_PREFIX="$1")
  cmake "${args[@]}" && cmake --build "$2"
}

consumer "$tmp/prefix" "$tmp/ok" > "$tmp/ok.log" 2>&1 || { cat "$tmp/ok.log"; fail "the consumer did not configure and build"; }
grep "tmo_consumer: tmo" "$tmp/ok.log"
grep -q "tmo_consumer: tmo .* from $tmp/prefix/" "$tmp/ok.log" || fail "tmo was not found in the scratch prefix"
"${emu[@]}" "$tmp/ok/consumer"

cp -a "$tmp/prefix" "$tmp/broken"
targets=$(find "$tmp/broken" -name tmoTargets.cmake)
grep -q 'INTERFACE_LINK_LIBRARIES' "$targets" || fail "tmoTargets.cmake names no link interface"
sed -i '/INTERFACE_LINK_LIBRARIES/d' "$targets"
# The same build directory, pointed at the broken prefix (the compiler
# checks are cached: a fresh configure costs a minute on a loaded machine).
rm -f "$tmp/ok/consumer"
if cmake -S "$proj" -B "$tmp/ok" -Dtmo_DIR="$(dirname "$targets")" -DCMAKE_PREFIX_PATH="$tmp/broken" \
     > "$tmp/broken.log" 2>&1 && cmake --build "$tmp/ok" >> "$tmp/broken.log" 2>&1; then
  fail "a consumer linked without tmo's private libraries: the check cannot fail"
fi
grep -q "tmo_consumer: tmo .* from $tmp/broken/" "$tmp/broken.log" || fail "the broken prefix was not the one found: $(tail -5 "$tmp/broken.log")"
grep -m3 'undefined reference' "$tmp/broken.log" || fail "the broken prefix failed for another reason: $(tail -5 "$tmp/broken.log")"
echo "find_package: the consumer links and runs; without the link interface it does not link"
