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
	/* the latest (TSC, clock) pair, with the error of its clock read (ns,
	 * rounded up) */
	_Atomic uint64_t tsc;
	_Atomic int64_t ns;
	_Atomic uint64_t rate_fx, rel_fx; /* ns per tick, relative error: << 32 */
	_Atomic int64_t err;
	/* a stamp at most near_ticks away from tsc, either side, has a margin
	 * within the floor (e->margin_ns): it converts to ns + rate * (stamp -
	 * tsc) + the floor (clock.c, lf_node_deadline) */
	_Atomic uint64_t near_ticks;
};
/* The pair before it, under the same sequence count. */
struct lf_cal_prev {
	_Atomic uint64_t tsc;
	_Atomic int64_t ns;
	_Atomic int64_t err;
};

#endif
