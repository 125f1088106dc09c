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

#include "tmo/tmo.h" /* tmo_now_ns */

#ifdef TMO_LF_TEST_HOOKS /* a step, made by a test (hook.h) */
#include <stdatomic.h>
extern _Atomic uint64_t tmo__test_tsc_skew;
extern _Atomic int64_t tmo__test_clock_skew;
#define LF_TSC_SKEW() atomic_load_explicit(&tmo__test_tsc_skew, memory_order_relaxed)
#else
#define LF_TSC_SKEW() 0
#endif

static inline uint64_t lf_tsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_ia32_rdtsc() + LF_TSC_SKEW();
#elif defined(__aarch64__)
	uint64_t v;
	__asm__ __volatile__("isb\n\tmrs %0, cntvct_el0" : "=r"(v) : : "memory");
	return v + LF_TSC_SKEW();
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

/* Whether the counter dates arms (clock.c decides once): x86 where CPUID
 * says the TSC is invariant; arm64 below; nowhere else. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static inline int lf_tsc_usable(uint64_t *pair_max)
{
	(void)pair_max;
	unsigned a, b, c, d;
	return __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
}
#elif defined(__aarch64__)
/* The generic timer's counter is invariant by the architecture (one
 * system-wide count at CNTFRQ_EL0); it is used where it is set, advances,
 * and costs less to read than the clock, measured: a kernel that traps EL0
 * reads (an erratum workaround) makes each one a trap.  The best of PASSES
 * passes each: one preemption inside a single pass (a loaded machine,
 * qemu-user) made the counter look dearer and the choice flip (seen:
 * unit/lf_dating found no calibrations under qemu).  *pair_max: the
 * widest calibration pair kept, scaled to the counter's rate. */
static inline int lf_tsc_usable(uint64_t *pair_max)
{
	uint64_t hz = lf_tsc_hz();
	if (hz == 0)
		return 0;
	enum { READS = 256, PASSES = 5 };
	uint64_t c0 = lf_tsc(), c1 = c0;
	int64_t tsc_ns = INT64_MAX, clock_ns = INT64_MAX;
	for (int p = 0; p < PASSES; p++) {
		int64_t t0 = tmo_now_ns();
		for (int i = 0; i < READS; i++)
			c1 = lf_tsc();
		int64_t t1 = tmo_now_ns();
		for (int i = 0; i < READS; i++)
			(void)tmo_now_ns();
		int64_t t2 = tmo_now_ns();
		tsc_ns = t1 - t0 < tsc_ns ? t1 - t0 : tsc_ns;
		clock_ns = t2 - t1 < clock_ns ? t2 - t1 : clock_ns;
	}
	*pair_max = hz / 125000 > 16 ? hz / 125000 : 16;
	return c1 > c0 && tsc_ns <= clock_ns;
}
#else
static inline int lf_tsc_usable(uint64_t *pair_max)
{
	(void)pair_max;
	return 0;
}
#endif

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
