/*
 * clock.c: the time source (an arm's stamp, its conversion to a deadline,
 * never early) and the tick word the timer thread publishes (its SLEEPING
 * flag: the wake-up protocol, ec.c).
 */
#ifndef TMO_LF_CLOCK_H
#define TMO_LF_CLOCK_H

#include "lf.h"
#include "ec.h"

void tmo__lf_clock_init(struct tmo *e);
/* Timer thread: publish the next tick (flags: LF_TW_*); returns its clock
 * reading, taken after the tick is visible. */
int64_t tmo__lf_tick_publish(struct tmo *e, unsigned flags);
/* An arm's stamp: the TSC (cpu.h: arm64's virtual counter too), or
 * CLOCK_MONOTONIC where there is none that is invariant and cheap. */
extern int tmo__lf_use_tsc;
static inline uint64_t lf_stamp(void)
{
	if (LF_LIKELY(tmo__lf_use_tsc))
		return lf_tsc();
	return (uint64_t)tmo_now_ns();
}
/* How long a calibration dates arms: while the slew allowed for a stamp
 * after it stays within the margin's floor. */
static inline int64_t lf_fresh_ns(const struct tmo *e)
{
	return e->margin_ns * (1000000 / LF_SLEW_PPM);
}
/* The longest the timer thread sleeps while arms keep coming, all far
 * (timer.c, Lazy), and the longest a cancel lets the holder of its node
 * sleep before freeing it: half the calibration's life. */
static inline int64_t lf_lazy_ns(const struct tmo *e)
{
	return lf_fresh_ns(e) / 2;
}
/* 1 if an arm stamped `stamp` is dated by it: the calibration is at most
 * lf_fresh_ns() old, or there is no TSC (the stamp is the clock).  Else the
 * arm reads the clock and holds its deadline (LF_STAMP_DEADLINE). */
static inline int lf_stamp_fresh(struct tmo *e, uint64_t stamp)
{
	/* acquire: the pair behind the bound is then visible to this thread,
	 * which may file the arm itself (src/lf/memory-order.md) */
	return !tmo__lf_use_tsc || stamp <= atomic_load_explicit(&e->fresh_until, memory_order_acquire);
}
/* The deadline of a node in a ring or in transit (RING, QUEUED): the time
 * of its arm (its stamp converted, never early, no later than `later_ns`,
 * a clock reading after the arm, or one now if 0) plus its timeout, or
 * the deadline it holds (LF_STAMP_DEADLINE). */
int64_t tmo__lf_node_deadline(struct tmo *e, const struct lf_node *n, int64_t later_ns);
/* The same, by r's owner for a node of r's ring whose stamp
 * lf_own_near (cal.h) did not convert (or that holds its deadline): a cap
 * it needs is r's last clock reading when that came after the arm. */
int64_t tmo__lf_node_deadline_far(struct tmo *e, struct lf_rec *r, const struct lf_node *n);
/* The deadline of a node of r's ring, by r's owner. */
static inline int64_t tmo__lf_node_deadline_own(struct tmo *e, struct lf_rec *r,
                                                const struct lf_node *n)
{
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	LF_PLANT_STEAL(stamp,
	               tmo_now_ns() + atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed));
	int64_t hi = stamp != LF_STAMP_DEADLINE && LF_LIKELY(tmo__lf_use_tsc)
	                     ? lf_own_near(&e->cal, &r->cal, stamp, e->margin_ns)
	                     : 0;
	if (LF_UNLIKELY(hi == 0))
		return tmo__lf_node_deadline_far(e, r, n);
	return hi + atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
}
/* Lower bound on that deadline, for waking the timer thread; 0 if unknown. */
int64_t tmo__lf_node_deadline_lower(struct tmo *e, uint64_t stamp, int64_t timeout_ns);
/* Timer thread: refresh the TSC calibration. */
void tmo__lf_cal_update(struct tmo *e);

#endif /* TMO_LF_CLOCK_H */
