/*
 * The calibration the lock-free core's timer thread publishes and every
 * filer reads (clock.c: Dating).  Part of struct tmo (lf.h).
 */
#ifndef TMO_LF_CAL_H
#define TMO_LF_CAL_H

#include <stdatomic.h>
#include <stdint.h>

/* TSC -> CLOCK_MONOTONIC conversion, published by the timer thread under a
 * sequence count (clock.c).  Integers, so that a filing converts a stamp
 * with two multiplies: rate and relative error as 32.32 fixed point,
 * rounded up; 0 rate: no conversion (no calibration yet, or too coarse). */
struct lf_cal {
	_Atomic uint32_t seq;
	/* how many steps the calibration found (clock.c, Steps): an owner's
	 * copy taken before the latest one is taken again */
	_Atomic uint32_t epoch;
	/* the latest (TSC, clock) pair, with the error of its clock read (ns,
	 * rounded up) */
	_Atomic uint64_t tsc;
	_Atomic int64_t ns;
	_Atomic uint64_t rate_fx, rel_fx; /* ns per tick, relative error: << 32 */
	_Atomic int64_t err;
	/* a stamp at most near_ticks away from tsc, either side, has a margin
	 * within the floor (e->margin_ns): it converts to ns + rate * (stamp -
	 * tsc) + the floor (clock.c, tmo__lf_node_deadline) */
	_Atomic uint64_t near_ticks;
	/* the first TSC read of the pair that found the latest step, and its
	 * clock read: a stamp below lo is dated lo_ns, the clock read it came
	 * before (0, 0: no step found) */
	_Atomic uint64_t lo;
	_Atomic int64_t lo_ns;
};
/* The pair before it, under the same sequence count. */
struct lf_cal_prev {
	_Atomic uint64_t tsc;
	_Atomic int64_t ns;
	_Atomic int64_t err;
};

/* x * fx >> 32, for a 32.32 fixed-point fx. */
static inline uint64_t lf_fx_mul(uint64_t x, uint64_t fx)
{
	return (uint64_t)(((unsigned __int128)x * fx) >> 32);
}

/* A published pair as one reader took it: its TSC and clock readings, rate,
 * the rate's relative error (an owner sizes a pair of its own from it:
 * clock.c, own_pair) and near window.  A pair dates a stamp within its window within the floor
 * however old the pair is (the window was sized by that pair's own error
 * and rate), so an owner keeps a copy (lf_rec.cal) and takes it again only
 * when a stamp lies outside it: a subtraction and a compare at a filing,
 * not the sequence count's loop. */
struct lf_cal_snap {
	uint64_t tsc, rate, rel, near, lo;
	int64_t ns;
	uint32_t epoch;
};

/* Copy c's latest pair into *p. */
static inline void lf_cal_copy(const struct lf_cal *c, struct lf_cal_snap *p)
{
	uint32_t s0, s1;
	do {
		s0 = atomic_load_explicit(&c->seq, memory_order_acquire);
		p->tsc = atomic_load_explicit(&c->tsc, memory_order_relaxed);
		p->ns = atomic_load_explicit(&c->ns, memory_order_relaxed);
		p->rate = atomic_load_explicit(&c->rate_fx, memory_order_relaxed);
		p->rel = atomic_load_explicit(&c->rel_fx, memory_order_relaxed);
		p->near = atomic_load_explicit(&c->near_ticks, memory_order_relaxed);
		p->lo = atomic_load_explicit(&c->lo, memory_order_relaxed);
		p->epoch = atomic_load_explicit(&c->epoch, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		s1 = atomic_load_explicit(&c->seq, memory_order_relaxed);
	} while (__builtin_expect((s0 & 1) || s0 != s1, 0));
}

/* A stamp's upper bound when it lies within p's near window, either side
 * (its margin is within the floor, `margin`), else 0.  A stamp before the
 * pair is converted back from it, as clock.c's tsc_bounds converts one
 * before both pairs: the margin covers the distance either way; not one
 * before a step (below p->lo), which the pair does not date. */
static inline int64_t lf_snap_near(const struct lf_cal_snap *p, uint64_t st, int64_t margin)
{
	if (st >= p->tsc)
		return st - p->tsc <= p->near ? p->ns + (int64_t)lf_fx_mul(st - p->tsc, p->rate) + margin
		                              : 0;
	return p->tsc - st <= p->near && st >= p->lo ? p->ns - (int64_t)lf_fx_mul(p->tsc - st, p->rate) + margin : 0;
}

/* The same from c's latest pair (the timer thread's filings). */
static inline int64_t lf_cal_near(const struct lf_cal *c, uint64_t st, int64_t margin)
{
	struct lf_cal_snap p;
	lf_cal_copy(c, &p);
	return lf_snap_near(&p, st, margin);
}

/* The same by an owner, from its copy *p, taken again from c when the
 * stamp lies outside it or a step was found since it was taken (its epoch:
 * a load from the line the arm read fresh_until from): the common case,
 * cheaply, and inline where an owner files (arm.c). */
static inline int64_t lf_own_near(const struct lf_cal *c, struct lf_cal_snap *p, uint64_t st,
                                  int64_t margin)
{
	int64_t hi = 0;
#ifndef TMO_LF_PLANT_STEP_EPOCH /* tests/hooked/lf_step.c must catch it */
	if (__builtin_expect(p->epoch == atomic_load_explicit(&c->epoch, memory_order_relaxed), 1))
#endif
		hi = lf_snap_near(p, st, margin);
	if (__builtin_expect(hi == 0, 0)) {
		lf_cal_copy(c, p);
		hi = lf_snap_near(p, st, margin);
	}
	return hi;
}

#endif
