/* Tests under qemu-user (the arm64 step: scripts/check arm64).  The cross
 * build runs every test executable through qemu-aarch64 with
 * TMO_UNDER_QEMU=1 in the guest's environment (cmake/cross_run.cmake).
 * qemu-user emulates the CPU, not the kernel: it passes most system calls
 * through, but a few things it handles itself (signals, /proc views of the
 * process, seccomp filters that would see qemu's own calls, the guest's
 * stack limits).  A test that needs one of them calls et_skip_under_qemu:
 * it prints "SKIPPED: under qemu-user: <why>" and exits 77, which the
 * cross build's ctest reports as a skip (tests/arm64/arm64.cmake), never a
 * pass.  On a real arm64 machine the variable is unset and nothing skips. */
#ifndef TMO_TEST_QEMU_H
#define TMO_TEST_QEMU_H

/* 1 when running under qemu-user (TMO_UNDER_QEMU=1). */
int et_under_qemu(void);
/* Under qemu-user: print why and exit 77.  Elsewhere: return. */
void et_skip_under_qemu(const char *why);

#endif
