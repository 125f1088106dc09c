#!/usr/bin/env bash
# tests/arm64/catches.sh ROOT SYSROOT WORK: the arm64 build catches an x86
# intrinsic on a path arm64 compiles (the defect issue 23 found: an
# unguarded __builtin_ia32_rdtsc in arm.c, __builtin_ia32_pause in fire.c).
# The lock-free core's files that read the counter or spin are compiled
# for arm64 with the arm64 preset's compiler and flags (cmake/aarch64.cmake:
# -Werror=implicit-function-declaration): as they are they must compile;
# with either defect planted in a scratch copy they must fail, naming the
# builtin.
set -uo pipefail
root=$1 sysroot=$2 work=$3
cc=aarch64-linux-gnu-gcc
flags=(-std=c11 -D_GNU_SOURCE -O2 -Wall -Werror=implicit-function-declaration
       -I "$work/src" -I "$root/include" -I "$sysroot/usr/include" -fsyntax-only)
rm -rf "$work" && mkdir -p "$work"
cp -r "$root/src" "$work/src"
fail=0
for f in arm.c fire.c clock.c; do
  if ! "$cc" "${flags[@]}" "$work/src/lf/$f" 2>"$work/control.log"; then
    echo "FAIL: src/lf/$f does not compile for arm64 as it is:"; cat "$work/control.log"; fail=1
  fi
done
[ $fail -eq 0 ] && echo "ok: src/lf/arm.c fire.c clock.c compile for arm64"

# plant FILE FROM TO BUILTIN: the defect in the scratch copy, compiled.
plant() {
  local f=$1 from=$2 to=$3 builtin=$4
  cp "$root/src/lf/$f" "$work/src/lf/$f"
  if ! grep -qF -- "$from" "$work/src/lf/$f"; then
    echo "FAIL: the plant's anchor '$from' is not in src/lf/$f (update this test)"; fail=1; return
  fi
  sed -i "s/$from/$to/" "$work/src/lf/$f"
  if "$cc" "${flags[@]}" "$work/src/lf/$f" >"$work/planted.log" 2>&1; then
    echo "FAIL: $builtin planted in src/lf/$f compiled for arm64 (not caught)"; fail=1
  elif grep -q "$builtin" "$work/planted.log"; then
    echo "ok: $builtin planted in src/lf/$f is caught:"; grep -m1 "$builtin" "$work/planted.log"
  else
    echo "FAIL: $builtin planted in src/lf/$f failed for another reason:"; cat "$work/planted.log"; fail=1
  fi
  cp "$root/src/lf/$f" "$work/src/lf/$f"
}
plant fire.c "lf_cpu_relax();" "__builtin_ia32_pause();" __builtin_ia32_pause
plant arm.c "uint64_t stamp = lf_tsc();" "uint64_t stamp = __builtin_ia32_rdtsc();" __builtin_ia32_rdtsc
exit $fail
