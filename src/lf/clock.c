/*
 * The time source of the lock-free core, and the tick word (the wake-up
 * protocol it carries: ec.c).
 *
 * Dating.  An arm stamps the TSC (one rdtsc, no clock read) while the
 * timer thread's calibration is fresh: at most lf_fresh_ns() old (the time
 * its slew allowance takes to reach the margin's floor: 10 ms for mpsc,
 * 50 ms for the wheel).  A later arm (the timer thread asleep, parked,
 * starved or in a long round) reads the clock and holds its deadline
 * (LF_STAMP_DEADLINE).  Whoever files a stamped node converts it into
 * CLOCK_MONOTONIC, rounded up, and adds the timeout, from the newer of the
 * calibration's two latest pairs that is not after the stamp; a stamp whose
 * margin grew past the floor is also capped by a clock read taken after
 * the arm (tmo__lf_node_deadline).  An owner filing its own arm dates it
 * from its copy of a pair when the stamp lies within that pair's near
 * window, which dates it within the floor however old the copy (cal.h,
 * lf_own_near); beyond it, from a pair it takes itself with the published
 * rate (own_pair), which dates its next arms too.  Every ring arm is stolen and every
 * inbox node taken in the timer thread's next round, so at most one
 * calibration comes between a stamp and its filing: it is converted from
 * the pair it was made under, within lf_fresh_ns() of it, however late it
 * is filed.  A deadline is never early, and arms keep their order
 * (guarantee 4) whenever they were made and filed (tests/unit/lf_dating.c,
 * tests/engine/starved.c).
 *
 * Steps.  All of it assumes the TSC and CLOCK_MONOTONIC advance together
 * within the rate's error.  A virtual machine paused and resumed (a
 * snapshot, a migration) may step one against the other (seen on CI: up
 * to a second early after a "virtual machine fork", the rate then
 * measured across it: results/2026-12-04-epyc2-78513c1).  So each
 * calibration checks its pair against the bounds the published one dates
 * its TSC with (stepped); a pair outside them starts a new segment: its
 * rate is measured from that pair (the engine's anchor, taken at its
 * creation and again at each step), none until it is precise enough (arms
 * read the clock meanwhile); the pair before it is dropped; a stamp below
 * its first TSC read, made before its clock read on either side of the
 * step, is dated by that clock read (cal.lo: late, never early); and the
 * epoch goes up, so that owners take their copies again (lf_own_near).
 * What no calibration sees: arms made after a step and dated before the
 * next calibration finds it are dated across it, early by as much as the
 * clock stepped ahead; closing that takes a clock read on every arm, what
 * the stamp exists to avoid (tests/hooked/lf_step.c).
 *
 * Ticks.  Each round of the timer thread publishes a tick (so do its
 * announcement of a long sleep and its park): the tick word's count goes
 * up and tick_at holds the clock read just after, a `now` that is never
 * ahead of the clock for those who need one cheaply (a spilling thread's
 * horizon).
 *
 * Conversion: a rate measured against CLOCK_MONOTONIC since the engine
 * was created (or since the latest step), anchored at a (TSC, clock) pair the timer thread
 * takes as its rounds go (tmo__lf_cal_update), rounded UP by a margin that
 * covers both pairs' read skew, the rate's error and NTP slew (LF_SLEW_PPM
 * of the stamp's distance from the pair), with a floor (MARGIN_NS, or a
 * twentieth of the resolution).  Without an invariant TSC a stamp is
 * CLOCK_MONOTONIC itself (arm reads the clock); TMO_LF_CLOCK=1 in the
 * environment forces that path where the TSC is usable (to test it: on
 * x86 and under qemu the counter is otherwise always taken).
 */
#include <errno.h>
#include <limits.h>
#include <linux/membarrier.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "hook.h"

/* ---- the TSC ---------------------------------------------------------------- */

/* Pairs whose two TSC reads are further apart than this are discarded
 * (x86; arm64's counter runs at CNTFRQ_EL0, 1-1000 MHz: lf_tsc_usable(),
 * cpu.h, scales it to the same 8 us). */
#define PAIR_MAX_TICKS 20000u
static uint64_t g_pair_max = PAIR_MAX_TICKS;

/* The least margin added to a converted arm time. */
#define MARGIN_NS 10000
/* A rate is not used while its relative error may exceed this. */
#define REL_MAX 0.01
/* How long an engine's creation may take pairs for its first rate: timely
 * (testing.h), and not. */
#define TIMELY_CAL_NS (50 * 1000 * 1000)
#define FIRST_RATE_NS (200 * 1000)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_use_tsc;
int tmo__lf_use_tsc; /* g_use_tsc, for lf_stamp() */
static int g_membarrier; /* 1: registered and working */

/* A (TSC, clock) pair: the clock read between two TSC reads, the pair's
 * TSC their midpoint, its width their distance.  Returns 1 for a narrow
 * pair (at most g_pair_max), 0 when five tries in a row came out wider (a
 * preemption or a stolen vCPU between the reads each time): the last one
 * is written all the same, its width saying how wide. */
static inline int64_t pair_once(uint64_t *a, uint64_t *b)
{
	*a = lf_tsc();
	LF_HOOK(pair, NULL);
	int64_t t = tmo_now_ns();
	*b = lf_tsc();
	return t;
}

static int tsc_pair(uint64_t *tsc, int64_t *ns, uint64_t *width)
{
	for (int i = 0;; i++) {
		uint64_t a, b;
		int64_t t = pair_once(&a, &b);
		if (b - a <= g_pair_max || i == 4) {
			*tsc = a + (b - a) / 2;
			*ns = t;
			*width = b - a;
			return b - a <= g_pair_max;
		}
	}
}

static void once_init(void)
{
	const char *clock = getenv("TMO_LF_CLOCK");
	g_use_tsc = (clock == NULL || strcmp(clock, "1") != 0) && lf_tsc_usable(&g_pair_max);
	tmo__lf_use_tsc = g_use_tsc;
#ifndef TMO__UNDER_TSAN
	/* TMO_LF_FENCE=1: the fallback, as where membarrier is missing (to
	 * measure it, and to run it outside TSan) */
	const char *force = getenv("TMO_LF_FENCE");
	if (force != NULL && strcmp(force, "1") == 0)
		return;
	long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
	g_membarrier = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
	               syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
}


/* v * 2^32 rounded up, as a 32.32 fixed-point value (v >= 0, small). */
static uint64_t fx_of(double v)
{
	double f = v * 4294967296.0;
	uint64_t u = (uint64_t)f;
	return (double)u < f ? u + 1 : u;
}

/* The window either side of a pair, in ticks, in which a stamp's margin
 * err + 1000 + d * rel stays within the floor (d, the stamp's distance in
 * ns, below (floor - err - 1000) / rel), over the rate, a hundredth less
 * for the roundings; 0 when there is none.  err: the pair's clock read
 * error (ns), rate in ns a tick, rel the rate's relative error. */
static uint64_t near_ticks(const struct tmo *e, double err, double rate, double rel)
{
	double room = (double)e->margin_ns - err - 1001.0;
	return rate > 0 && room > 0 ? (uint64_t)(room * 0.99 / (rel * rate)) : 0;
}

/* 1 when the pair (tsc, ns), of width w, lies outside the bounds the
 * published calibration c dates its TSC with: the clock read more than
 * both pairs' read errors, 1000 ns for the roundings and the rate's error
 * over their distance from where c's pair and rate put it, or a TSC below
 * c's pair.  Then the model arms are dated by (a line through the latest
 * pair at the published rate, within the margin) no longer holds: the
 * clock and the TSC stepped against each other (a step).  0 also when
 * nothing is published to check against. */
static int stepped(const struct lf_cal *c, uint64_t tsc, int64_t ns, uint64_t w)
{
	uint64_t rate = atomic_load_explicit(&c->rate_fx, memory_order_relaxed);
	if (rate == 0)
		return 0;
	uint64_t ctsc = atomic_load_explicit(&c->tsc, memory_order_relaxed);
	if (tsc < ctsc)
		return 1;
	int64_t d = (int64_t)lf_fx_mul(tsc - ctsc, rate);
	int64_t tol = atomic_load_explicit(&c->err, memory_order_relaxed) +
	              (int64_t)lf_fx_mul(w, rate) + 1 + 1000 +
	              (int64_t)lf_fx_mul((uint64_t)d, atomic_load_explicit(&c->rel_fx, memory_order_relaxed));
	int64_t miss = ns - (atomic_load_explicit(&c->ns, memory_order_relaxed) + d);
	return miss > tol || miss < -tol;
}

void tmo__lf_cal_update(struct tmo *e)
{
	if (!g_use_tsc)
		return;
	uint64_t tsc, w;
	int64_t ns;
	/* A wide pair is not published: its clock read lies anywhere within
	 * it, so every conversion from it would carry its width as margin,
	 * past the floor, and be capped only by a clock read taken after the
	 * arm: by a starved timer thread's filing, long after.  Dated up to
	 * twice the width late, such arms would run after arms due a
	 * resolution later (guarantee 4; the width of a preempted pair is
	 * 50-300 us, the resolution 50 us for mpsc).  The published
	 * calibration ages instead, and past lf_fresh_ns() arms read the
	 * clock (tests/hooked/lf_pair.c). */
	int narrow = tsc_pair(&tsc, &ns, &w);
#ifndef TMO_LF_PLANT_WIDE_PAIR
	if (!narrow)
		return;
#else
	(void)narrow;
#endif
	struct lf_cal *c = &e->cal;
	/* Steps (see Steps above): a new segment, measured from this pair */
	int step = stepped(c, tsc, ns, w);
#ifdef TMO_LF_PLANT_STEP_NONE /* tests/hooked/lf_step.c must catch it */
	step = 0;
#endif
	if (step || e->anchor.tsc == 0) {
		e->anchor.tsc = tsc;
		e->anchor.ns = ns;
		e->anchor.width = w;
	}
	double rate = 0, rel = 0, err = 0;
	if (tsc > e->anchor.tsc + e->anchor.width + w && ns > e->anchor.ns) {
		rate = (double)(ns - e->anchor.ns) / (double)(tsc - e->anchor.tsc);
		/* each pair's clock read lies somewhere within its TSC reads */
		rel = (double)(e->anchor.width + w) / (double)(tsc - e->anchor.tsc) +
		      LF_SLEW_PPM * 1e-6;
		err = (double)w * rate * (1.0 + rel);
		if (rel > REL_MAX)
			rate = 0;
	} else if (step) { /* no rate yet: this pair's error from the last one */
		err = (double)lf_fx_mul(w, atomic_load_explicit(&c->rate_fx, memory_order_relaxed)) * 1.01;
	}
	uint32_t s = atomic_load_explicit(&c->seq, memory_order_relaxed);
	atomic_store_explicit(&c->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	struct lf_cal_prev *p = &e->cal_prev;
	/* after a step the pair before it dates nothing: this one is both */
	atomic_store_explicit(&p->tsc, step ? tsc : atomic_load_explicit(&c->tsc, memory_order_relaxed),
	                      memory_order_relaxed);
	atomic_store_explicit(&p->ns, step ? ns : atomic_load_explicit(&c->ns, memory_order_relaxed),
	                      memory_order_relaxed);
	atomic_store_explicit(&p->err,
	                      step ? (int64_t)err + 1 : atomic_load_explicit(&c->err, memory_order_relaxed),
	                      memory_order_relaxed);
	atomic_store_explicit(&c->tsc, tsc, memory_order_relaxed);
	atomic_store_explicit(&c->ns, ns, memory_order_relaxed);
	atomic_store_explicit(&c->rate_fx, rate > 0 ? fx_of(rate) : 0, memory_order_relaxed);
	atomic_store_explicit(&c->rel_fx, fx_of(rel), memory_order_relaxed);
	atomic_store_explicit(&c->err, (int64_t)err + 1, memory_order_relaxed);
	atomic_store_explicit(&c->near_ticks, near_ticks(e, err, rate, rel), memory_order_relaxed);
	if (step) {
		/* a stamp below its first TSC read was made before its clock read */
		atomic_store_explicit(&c->lo, tsc - w / 2, memory_order_relaxed);
		atomic_store_explicit(&c->lo_ns, ns, memory_order_relaxed);
		atomic_store_explicit(&c->epoch, atomic_load_explicit(&c->epoch, memory_order_relaxed) + 1,
		                      memory_order_relaxed);
	}
	atomic_store_explicit(&c->seq, s + 2, memory_order_release);
	/* after the pair: an arm that sees the new bound finds the pair */
	uint64_t fresh = rate <= 0               ? 0
	                 : tmo__timely_timer() ? UINT64_MAX /* testing.h */
	                                       : tsc + (uint64_t)((double)lf_fresh_ns(e) / rate);
	atomic_store_explicit(&e->fresh_until, fresh, memory_order_release);
}

/* Bounds on the time of a TSC stamp from the published calibration, from
 * the newer of its two pairs that is not after the stamp (else the older);
 * 0 (both) when there is none yet.  A stamp made before the pair that
 * found the latest step (below cal.lo) is bounded above by that pair's
 * clock read, with no lower bound (0), margin 0.  Returns the margin: the bounds are
 * [t - margin, t + max(margin, the floor)] around the converted time t.
 * Integer arithmetic: the rate is rounded up, which moves t by less than
 * 2^-32 of the distance (far below the slew allowance) and the products
 * are rounded down by under 1 ns each (the margin's 1000 ns cover both). */
static int64_t tsc_bounds(struct tmo *e, uint64_t st, int64_t *lo, int64_t *hi)
{
	struct lf_cal *c = &e->cal;
	struct lf_cal_prev *p = &e->cal_prev;
	uint64_t tsc, rate, rel, lo_tsc;
	int64_t ns, err, lo_ns;
	uint32_t s0, s1;
	do {
		s0 = atomic_load_explicit(&c->seq, memory_order_acquire);
		lo_tsc = atomic_load_explicit(&c->lo, memory_order_relaxed);
		lo_ns = atomic_load_explicit(&c->lo_ns, memory_order_relaxed);
		tsc = atomic_load_explicit(&c->tsc, memory_order_relaxed);
		ns = atomic_load_explicit(&c->ns, memory_order_relaxed);
		err = atomic_load_explicit(&c->err, memory_order_relaxed);
		rate = atomic_load_explicit(&c->rate_fx, memory_order_relaxed);
		rel = atomic_load_explicit(&c->rel_fx, memory_order_relaxed);
		if (st < tsc && atomic_load_explicit(&p->tsc, memory_order_relaxed) != 0) {
			tsc = atomic_load_explicit(&p->tsc, memory_order_relaxed);
			ns = atomic_load_explicit(&p->ns, memory_order_relaxed);
			err = atomic_load_explicit(&p->err, memory_order_relaxed);
		}
		atomic_thread_fence(memory_order_acquire);
		s1 = atomic_load_explicit(&c->seq, memory_order_relaxed);
	} while ((s0 & 1) || s0 != s1);
#ifndef TMO_LF_PLANT_STEP_LO /* tests/hooked/lf_step.c must catch it */
	if (st < lo_tsc) { /* made before a step's pair: dated by its clock read */
		*lo = 0;
		*hi = lo_ns;
		return 0;
	}
#else
	(void)lo_tsc;
	(void)lo_ns;
#endif
	if (rate == 0) {
		*lo = *hi = 0;
		return 0;
	}
	int64_t d = (int64_t)lf_fx_mul(st >= tsc ? st - tsc : tsc - st, rate);
	int64_t margin = err + 1000 + (int64_t)lf_fx_mul((uint64_t)d, rel);
	int64_t t = st >= tsc ? ns + d : ns - d;
	*hi = t + (margin > e->margin_ns ? margin : e->margin_ns);
	*lo = t - margin;
	return margin;
}

/* ---- ticks ------------------------------------------------------------------- */

void tmo__lf_clock_init(struct tmo *e)
{
	pthread_once(&g_once, once_init);
	unsigned fence = g_membarrier ? 0 : LF_TW_FENCE;
	atomic_store_explicit(&e->tickw, fence, memory_order_relaxed);
	atomic_store_explicit(&e->tick_at, tmo_now_ns(), memory_order_relaxed);
	tmo__lf_cal_update(e);
	/* That pair is the engine's anchor (tmo__lf_cal_update): the rate
	 * needs a second one far enough from it for its relative error to
	 * reach REL_MAX, natively some microseconds, where a pair is tens of
	 * ticks wide.  Taken here, so that arms are dated from the TSC from the
	 * start, not only after the timer thread's first rounds: at most
	 * FIRST_RATE_NS, or TIMELY_CAL_NS when timely (testing.h): under
	 * valgrind a pair is thousands of ticks wide, and until the timer
	 * thread's next turn, in valgrind's pace tens to hundreds of
	 * milliseconds later, every arm read the clock: a share of a counted
	 * loop that differed from run to run.  Before the timer thread exists
	 * (the one writer). */
	int64_t t0 = tmo_now_ns(), most = tmo__timely_timer() ? TIMELY_CAL_NS : FIRST_RATE_NS;
	while (g_use_tsc && atomic_load_explicit(&e->cal.rate_fx, memory_order_relaxed) == 0 &&
	       tmo_now_ns() - t0 < most)
		tmo__lf_cal_update(e);
}

int64_t tmo__lf_tick_publish(struct tmo *e, unsigned flags)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	uint64_t k = (tw >> LF_TW_SHIFT) + 1;
	/* A full barrier: the clock is read after the new word is visible. */
	atomic_exchange_explicit(&e->tickw, k << LF_TW_SHIFT | (tw & LF_TW_FENCE) | flags,
	                         memory_order_seq_cst);
	int64_t ns = tmo_now_ns();
	atomic_store_explicit(&e->tick_at, ns, memory_order_relaxed);
	return ns;
}

static inline int64_t near_bound(struct tmo *e, uint64_t st)
{
	return lf_cal_near(&e->cal, st, e->margin_ns);
}

int64_t tmo__lf_node_deadline(struct tmo *e, const struct lf_node *n, int64_t later_ns)
{
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	int64_t timeout = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
	if (stamp == LF_STAMP_DEADLINE)
		return timeout;
	LF_PLANT_STEAL(stamp, (later_ns != 0 ? later_ns : tmo_now_ns()) + timeout);
	if (!g_use_tsc) /* the stamp is the clock reading itself */
		return (int64_t)stamp + timeout;
	int64_t lo, hi = near_bound(e, stamp);
	if (LF_LIKELY(hi != 0))
		return hi + timeout;
	/* Within the floor (a stamp near its pair, as a stamp of a fresh
	 * calibration filed in time is) the arm lies in [hi - 2 floors, hi]:
	 * dated at most two floors (e->margin_ns: a twentieth of the
	 * resolution, at least 10 us) late, no later than a capped stamp may
	 * be (a cap only lowers it), so arms keep their order beyond the
	 * resolution without a clock read.  Further away the margin grows
	 * (0.1 % of the distance), and a clock read taken after the arm caps
	 * it: never later than that. */
	if (tsc_bounds(e, stamp, &lo, &hi) <= e->margin_ns && hi != 0)
		return hi + timeout;
	int64_t now = later_ns != 0 ? later_ns : tmo_now_ns();
	return (hi != 0 && hi < now ? hi : now) + timeout;
}

/* r's cap, read by its owner (tmo__lf_node_deadline_far): a TSC read, the
 * clock, a TSC read again.  The pair is the owner's own calibration pair
 * when it is narrow and a rate is published: the rate is measured from the
 * engine's anchor (tmo__lf_cal_update) and its relative error bounds the
 * drift from any pair, so a pair the owner takes dates stamps near it as
 * the timer thread's would, sized the same way (its own read error, the
 * rate's, the floor).  The owner's next arms then convert from it, as from
 * the timer thread's, without a clock read: where the timer thread
 * calibrates late (starved, or under valgrind, whose threads take turns)
 * a held arm filed at once read the clock each time it lay beyond the
 * published pair's window.  Returns 1 when r->cal is that pair. */
static int own_pair(struct tmo *e, struct lf_rec *r)
{
	uint64_t a, b;
	int64_t ns = pair_once(&a, &b);
	/* a stamp before a was made before ns was read */
	r->cap_tsc = a;
	r->cap_ns = ns;
	if (b - a > g_pair_max)
		return 0;
	struct lf_cal_snap p;
	lf_cal_copy(&e->cal, &p);
	if (p.rate == 0 || p.rel == 0)
		return 0;
	/* tmo__lf_cal_update's sizes, from this pair's width */
	double rate = (double)p.rate / 4294967296.0, rel = (double)p.rel / 4294967296.0;
	uint64_t near = near_ticks(e, (double)(b - a) * rate * (1.0 + rel), rate, rel);
	if (near == 0)
		return 0;
	r->cal = (struct lf_cal_snap){.tsc = a + (b - a) / 2,
	                              .rate = p.rate,
	                              .rel = p.rel,
	                              .near = near,
	                              .lo = p.lo,
	                              .ns = ns,
	                              .epoch = p.epoch};
#ifdef TMO_LF_PLANT_OWN_PAIR_EARLY /* tests/hooked/lf_pair.c must catch it */
	r->cal.ns = ns - 2 * e->margin_ns;
#endif
	return 1;
}

int64_t tmo__lf_node_deadline_far(struct tmo *e, struct lf_rec *r, const struct lf_node *n)
{
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	int64_t timeout = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
	if (stamp == LF_STAMP_DEADLINE)
		return timeout;
	if (!g_use_tsc)
		return (int64_t)stamp + timeout;
	/* tmo__lf_node_deadline's steps after its near_bound, which the caller
	 * took: both pairs, then a cap */
	int64_t lo, hi;
	if (tsc_bounds(e, stamp, &lo, &hi) <= e->margin_ns && hi != 0)
		return hi + timeout;
	/* The cap: r's last clock reading, if it came after this arm.  Its
	 * TSC read completes before the clock's own (fenced) read, and an arm
	 * later in program order reads the TSC after that: a stamp below
	 * cap_tsc was made before cap_ns was read.  A spilled arm is filed
	 * eight arms after it was made, so one reading serves the eight arms
	 * before it; an arm filed at once (arm.c, file_own) is the newest, and
	 * takes a reading of its own: a pair, which dates it and the owner's
	 * arms after it (own_pair). */
	int64_t own;
	if (stamp >= r->cap_tsc && own_pair(e, r) &&
	    (own = lf_snap_near(&r->cal, stamp, e->margin_ns)) != 0)
		return own + timeout;
	return (hi != 0 && hi < r->cap_ns ? hi : r->cap_ns) + timeout;
}

int64_t tmo__lf_node_deadline_lower(struct tmo *e, uint64_t stamp, int64_t timeout_ns)
{
	if (stamp == LF_STAMP_DEADLINE)
		return timeout_ns;
	LF_PLANT_STEAL(stamp, atomic_load_explicit(&e->tick_at, memory_order_relaxed) + timeout_ns);
	if (!g_use_tsc)
		return (int64_t)stamp + timeout_ns;
	int64_t lo, hi;
	tsc_bounds(e, stamp, &lo, &hi);
	return lo > 0 ? lo + timeout_ns : 0;
}

