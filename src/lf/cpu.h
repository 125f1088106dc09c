/*
 * The two CPU-specific instructions of the lock-free core, behind one
 * guard each, so that no x86-only code is on any path elsewhere:
 *
 *   lf_tsc()        the CPU's free-running counter, which the core calls
 *                   "the TSC" (clock.c: Dating): x86's time-stamp counter
 *                   (rdtsc); arm64's generic timer virtual counter
 *                   (CNTVCT_EL0, rate in CNTFRQ_EL0), read after an isb so
 *                   that it is not taken ahead of the instructions before
 *                   it (the architecture lets an mrs of the counter execute
 *                   out of order; a stamp taken early would date an arm
 *                   early); 0 elsewhere.  clock.c decides, once, whether
 *                   it is used (tmo__lf_use_tsc): x86 where CPUID says the TSC
 *                   is invariant; arm64 where CNTFRQ_EL0 is set, the
 *                   counter advances and a read measures cheaper than a
 *                   clock read (a kernel that traps EL0 counter reads for
 *                   an erratum makes it a system call); else arms read
 *                   CLOCK_MONOTONIC.
 *   lf_cpu_relax()  one spin-wait step: x86 pause, arm64 yield.
 */
#ifndef TMO_LF_CPU_H
#define TMO_LF_CPU_H

#include <stdint.h>

static inline uint64_t lf_tsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
	uint64_t v;
	__asm__ __volatile__("isb\n\tmrs %0, cntvct_el0" : "=r"(v) : : "memory");
	return v;
#else
	return 0;
#endif
}

/* The counter's rate in Hz where the architecture states it (arm64:
 * CNTFRQ_EL0, set by firmware), 0 where it must be measured (x86). */
static inline uint64_t lf_tsc_hz(void)
{
#if defined(__aarch64__)
	uint64_t f;
	__asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(f));
	return f;
#else
	return 0;
#endif
}

static inline void lf_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" : : : "memory");
#else
	__asm__ __volatile__("" : : : "memory");
#endif
}

#endif /* TMO_LF_CPU_H */
