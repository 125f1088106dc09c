/*
 * The time source of the lock-free core, and the wake-up protocol.
 *
 * Ticks.  While arms keep coming the timer thread publishes a tick every
 * tick_ns: it exchanges the tick word (a full barrier), then reads the
 * clock, so tab[k].ns is later than every load that still saw tick k - 1.
 * An arm stores the tick k it read; it was called before tick k + 1 became
 * visible, hence before tab[k + 1].ns: that reading plus the timeout is a
 * deadline that is never early.  And it was called after tick k was
 * visible, after tab[k - 1].ns was read: a lower bound, used only to decide
 * whether a wake-up or a steal is needed.
 *
 * Order (guarantee 4): two arms' computed deadlines differ from their true
 * ones by at most the gap between two ticks, so arms further apart than the
 * resolution keep their order while every gap is at most the resolution.
 * The timer thread measures each gap; when one is late by more than a
 * quarter of the resolution (a CPU hog, a preempted timer thread) it sets
 * LF_TW_PRECISE for PRECISE_HOLD_NS, and arms stamp the TSC meanwhile.
 * While it sleeps it sets LF_TW_PRECISE too (no tick comes).  An arm made
 * during the late gap itself is dated, besides the late tick, by the first
 * clock reading known to follow it: the spill that takes it out of its
 * ring (its owner reads the clock then), a later spill of the same thread
 * (which bounds every arm still in that ring: lf_rec.bound_*), or the
 * steal.  What stays exposed: arms that no later spill of their thread
 * bounds and that the timer thread steals late may be dated late by up to
 * the gap's lateness, and fire that much later (never early).  Measured:
 * 16 timers 2 ms apart, 4 spinning processes on 2 CPUs, 0 inversions in 900
 * runs (18 in 300 before the spill bound).
 *
 * Precise stamps: the TSC, converted with a rate measured against
 * CLOCK_MONOTONIC since the first engine was created, anchored at a (TSC,
 * clock) pair the timer thread takes at every tick, rounded UP by a margin
 * that covers both pairs' read skew, the rate's error and NTP slew (0.1 %).
 * The margin has a floor (MARGIN_NS, or a twentieth of the resolution), the
 * same for every arm, so arms keep their order.  Without an invariant TSC a
 * precise stamp is CLOCK_MONOTONIC itself.
 *
 * Waking the timer thread.  Before it sleeps the timer thread sets
 * LF_TW_SLEEPING, then looks at every ring, base and the inbox; an arm
 * publishes its node, then reads the tick word again.  That is Dekker's
 * pattern, and needs a StoreLoad barrier on both sides: the timer thread
 * pays it for both with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) (a
 * barrier on every running thread of the process), so arm needs only a
 * compiler barrier.  Where membarrier is unavailable (or under TSan, which
 * does not model it, or with TMO_LF_FENCE=1 in the environment) the tick
 * word carries LF_TW_FENCE and arm fences.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lf.h"

/* ---- futex-backed event counts -------------------------------------------- */

static int ec_gettime(const struct ck_ec_ops *ops, struct timespec *out)
{
	(void)ops;
	return clock_gettime(CLOCK_MONOTONIC, out);
}

/* ck_ec passes an ABSOLUTE CLOCK_MONOTONIC deadline: FUTEX_WAIT_BITSET takes
 * exactly that (plain FUTEX_WAIT would read it as relative). */
static void ec_wait32(const struct ck_ec_wait_state *st, const uint32_t *addr, uint32_t expect,
                      const struct timespec *deadline)
{
	(void)st;
	syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expect, deadline, NULL,
	        FUTEX_BITSET_MATCH_ANY);
}

static void ec_wake32(const struct ck_ec_ops *ops, const uint32_t *addr)
{
	(void)ops;
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static const struct ck_ec_ops ec_ops = {
	.gettime = ec_gettime,
	.wait32 = ec_wait32,
	.wake32 = ec_wake32,
};
static const struct ck_ec_mode ec_mode = {.ops = &ec_ops, .single_producer = false};

static int ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* ck_ec32_wait sleeps in its own back-off steps (2 ms, then 16 ms, ...) and
 * looks at the caller's deadline only between them: clamp each step to our
 * deadline and end the wait once it has passed. */
static int clamp_to_deadline(const struct ck_ec_wait_state *st, struct timespec *step)
{
	const struct timespec *mine = st->data;
	if (!ts_before(&st->now, mine))
		return 1;
	if (ts_before(mine, step))
		*step = *mine;
	return 0;
}

void lf_ec_wait(struct ck_ec32 *ec, uint32_t v, int64_t deadline_ns)
{
	if (deadline_ns == INT64_MAX) {
		ck_ec32_wait(ec, &ec_mode, v, NULL);
	} else {
		struct timespec ts = tmo__ts_from_ns(deadline_ns);
		ck_ec32_wait_pred(ec, &ec_mode, v, clamp_to_deadline, &ts, &ts);
	}
}

void lf_ec_wake(struct ck_ec32 *ec) { ck_ec32_add(ec, &ec_mode, 1); }
uint32_t lf_ec_value(struct ck_ec32 *ec) { return ck_ec32_value(ec); }

/* ---- the TSC ---------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
static inline uint64_t read_tsc(void) { return __rdtsc(); }
static int tsc_invariant(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
}
#else
static inline uint64_t read_tsc(void) { return 0; }
static int tsc_invariant(void) { return 0; }
#endif

/* Pairs whose two TSC reads are further apart than this are discarded. */
#define PAIR_MAX_TICKS 20000u
/* The least margin added to a converted arm time. */
#define MARGIN_NS 10000
/* A rate is not used while its relative error may exceed this. */
#define REL_MAX 0.01
/* How long arms stay precise after a late tick. */
#define PRECISE_HOLD_NS (200 * TMO_NSEC_PER_MSEC)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_use_tsc;
int lf_use_tsc; /* g_use_tsc, for lf_stamp_precise() */
static uint64_t g_cal_tsc, g_cal_width;
static int64_t g_cal_ns;
static int g_membarrier; /* 1: registered and working */

static void tsc_pair(uint64_t *tsc, int64_t *ns, uint64_t *width)
{
	for (int i = 0;; i++) {
		uint64_t a = read_tsc();
		int64_t t = tmo_now_ns();
		uint64_t b = read_tsc();
		if (b - a <= PAIR_MAX_TICKS || i == 4) {
			*tsc = a + (b - a) / 2;
			*ns = t;
			*width = b - a;
			return;
		}
	}
}

static void once_init(void)
{
	g_use_tsc = tsc_invariant();
	lf_use_tsc = g_use_tsc;
	if (g_use_tsc)
		tsc_pair(&g_cal_tsc, &g_cal_ns, &g_cal_width);
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


static double bits_d(uint64_t b)
{
	double d;
	memcpy(&d, &b, sizeof d);
	return d;
}
static uint64_t d_bits(double d)
{
	uint64_t b;
	memcpy(&b, &d, sizeof b);
	return b;
}

void lf_cal_update(struct tmo *e)
{
	if (!g_use_tsc)
		return;
	uint64_t tsc, w;
	int64_t ns;
	tsc_pair(&tsc, &ns, &w);
	double rate = 0, rel = 0, err = 0;
	if (tsc > g_cal_tsc + g_cal_width + w && ns > g_cal_ns) {
		rate = (double)(ns - g_cal_ns) / (double)(tsc - g_cal_tsc);
		/* each pair's clock read lies somewhere within its TSC reads */
		rel = (double)(g_cal_width + w) / (double)(tsc - g_cal_tsc) + 1e-3;
		err = (double)w * rate * (1.0 + rel);
		if (rel > REL_MAX)
			rate = 0;
	}
	struct lf_cal *c = &e->cal;
	uint32_t s = atomic_load_explicit(&c->seq, memory_order_relaxed);
	atomic_store_explicit(&c->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&c->tsc, tsc, memory_order_relaxed);
	atomic_store_explicit(&c->ns, ns, memory_order_relaxed);
	atomic_store_explicit(&c->rate_bits, d_bits(rate), memory_order_relaxed);
	atomic_store_explicit(&c->rel_bits, d_bits(rel), memory_order_relaxed);
	atomic_store_explicit(&c->err_bits, d_bits(err), memory_order_relaxed);
	atomic_store_explicit(&c->seq, s + 2, memory_order_release);
}

/* Bounds on the time of a TSC stamp from the published calibration; 0
 * (both) when there is none yet. */
static void tsc_bounds(struct tmo *e, uint64_t st, int64_t *lo, int64_t *hi)
{
	struct lf_cal *c = &e->cal;
	uint64_t tsc, rb, eb, lb;
	int64_t ns;
	uint32_t s0, s1;
	do {
		s0 = atomic_load_explicit(&c->seq, memory_order_acquire);
		tsc = atomic_load_explicit(&c->tsc, memory_order_relaxed);
		ns = atomic_load_explicit(&c->ns, memory_order_relaxed);
		rb = atomic_load_explicit(&c->rate_bits, memory_order_relaxed);
		lb = atomic_load_explicit(&c->rel_bits, memory_order_relaxed);
		eb = atomic_load_explicit(&c->err_bits, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		s1 = atomic_load_explicit(&c->seq, memory_order_relaxed);
	} while ((s0 & 1) || s0 != s1);
	double rate = bits_d(rb), rel = bits_d(lb), err = bits_d(eb);
	if (rate <= 0) {
		*lo = *hi = 0;
		return;
	}
	double d = tsc >= st ? -(double)(tsc - st) * rate : (double)(st - tsc) * rate;
	double margin = err + 1000.0 + (d < 0 ? -d : d) * rel;
	double floor_ns = (double)e->margin_ns;
	double t = (double)ns + d;
	*hi = (int64_t)(t + (margin > floor_ns ? margin : floor_ns));
	*lo = (int64_t)(t - margin);
}

/* ---- ticks ------------------------------------------------------------------- */

void lf_clock_init(struct tmo *e)
{
	pthread_once(&g_once, once_init);
	unsigned fence = g_membarrier ? 0 : LF_TW_FENCE;
	/* tick 1 is published by the timer thread's first round; until then
	 * arms stamp precisely */
	atomic_store_explicit(&e->tickw, (uint64_t)0 << LF_TW_SHIFT | fence | LF_TW_PRECISE,
	                      memory_order_relaxed);
	lf_cal_update(e);
}

int64_t lf_tick_publish(struct tmo *e, unsigned flags)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	uint64_t k = (tw >> LF_TW_SHIFT) + 1;
	struct lf_tick *t = &e->tab[k % LF_TICKS];
	/* seqlock write of the entry: readers check its tick before and after */
	atomic_store_explicit(&t->tick, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	/* A full barrier, so the clock is read after the new tick is visible. */
	atomic_exchange_explicit(&e->tickw, k << LF_TW_SHIFT | (tw & LF_TW_FENCE) | flags,
	                         memory_order_seq_cst);
	uint64_t tsc = g_use_tsc ? read_tsc() : 0;
	int64_t ns = tmo_now_ns();
	atomic_store_explicit(&t->ns, ns, memory_order_relaxed);
	atomic_store_explicit(&t->tsc, tsc, memory_order_relaxed);
	atomic_store_explicit(&t->tick, k, memory_order_release);
	return ns;
}

/* The clock reading of tick k, or 0 if the table no longer (or not yet)
 * holds it. */
static int64_t tick_ns_of(struct tmo *e, uint64_t k)
{
	if (k == 0)
		return 0;
	struct lf_tick *t = &e->tab[k % LF_TICKS];
	if (atomic_load_explicit(&t->tick, memory_order_acquire) != k)
		return 0;
	int64_t ns = atomic_load_explicit(&t->ns, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&t->tick, memory_order_relaxed) == k ? ns : 0;
}

int64_t lf_arm_time_upper(struct tmo *e, uint64_t stamp)
{
	return lf_arm_time_upper_before(e, stamp, 0);
}

/* Whether tick k closed on time (its gap within the period plus an eighth
 * of the resolution); *next: the reading of tick k + 1, or 0. */
static int closed_on_time(struct tmo *e, uint64_t k, int64_t *next)
{
	int64_t ns = tick_ns_of(e, k + 1), prev = tick_ns_of(e, k);
	*next = ns;
	return ns != 0 && prev != 0 && ns - prev <= e->tick_ns + e->resolution_ns / 8;
}

int lf_tick_closed_on_time(struct tmo *e, uint64_t k)
{
	int64_t next;
	return closed_on_time(e, k, &next);
}

/* The bounds of the clock reading behind a precise stamp: the reading
 * itself when arm read the clock (returns 1, exact), else the TSC
 * reading's (0 where unknown). */
static int precise_bounds(struct tmo *e, uint64_t stamp, int64_t *lo, int64_t *hi)
{
	uint64_t st = stamp & ~LF_PRECISE;
	if (!g_use_tsc) {
		*lo = *hi = (int64_t)st;
		return 1;
	}
	tsc_bounds(e, st, lo, hi);
	return 0;
}

int64_t lf_arm_time_upper_before(struct tmo *e, uint64_t stamp, int64_t later_ns)
{
	if (stamp & LF_PRECISE) {
		int64_t lo, hi;
		if (precise_bounds(e, stamp, &lo, &hi))
			return hi;
		/* capped by a clock read after the arm: never early, whatever the
		 * TSC does */
		int64_t now = later_ns != 0 ? later_ns : tmo_now_ns();
		return hi != 0 && hi < now ? hi : now;
	}
	/* The next tick's reading bounds the arm; when that tick closed on
	 * time it is also close to the arm. */
	int64_t ns;
	if (closed_on_time(e, stamp, &ns))
		return ns;
	/* Not published yet, or late (a hog, a preempted timer thread), or
	 * overwritten: the caller runs after the arm, so a clock read now is an
	 * upper bound too, and close when the arm was recent (a spill, a steal
	 * soon after it); so is every later tick's reading, the oldest the
	 * tightest.  The least of them. */
	int64_t now = later_ns != 0 ? later_ns : tmo_now_ns();
	if (ns == 0) {
		uint64_t cur = atomic_load_explicit(&e->tickw, memory_order_acquire) >> LF_TW_SHIFT;
		for (uint64_t k = stamp + 2; ns == 0 && k <= cur && k + LF_TICKS > cur; k++)
			ns = tick_ns_of(e, k);
	}
	return ns != 0 && ns < now ? ns : now;
}

int64_t lf_arm_time_lower(struct tmo *e, uint64_t stamp)
{
	if (stamp == LF_STAMP_DEADLINE)
		return 0;
	if (stamp & LF_PRECISE) {
		int64_t lo, hi;
		precise_bounds(e, stamp, &lo, &hi);
		return lo > 0 ? lo : 0;
	}
	return stamp > 0 ? tick_ns_of(e, stamp - 1) : 0;
}

/* ---- waking the timer thread ------------------------------------------------- */

void lf_heavy_barrier(struct tmo *e)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (!(tw & LF_TW_FENCE) &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
		/* Not registered (a child after fork, say): every arm fences from
		 * now on.  Arms that read the word before this did not; the caller
		 * sleeps at most one tick this time, and looks again. */
		atomic_fetch_or_explicit(&e->tickw, LF_TW_FENCE, memory_order_seq_cst);
	}
	atomic_thread_fence(memory_order_seq_cst);
}

void lf_wake_for(struct tmo *e, int64_t deadline_lower)
{
	atomic_thread_fence(memory_order_acquire); /* sleep_until is stored before SLEEPING */
	int64_t until = atomic_load_explicit(&e->sleep_until, memory_order_relaxed);
	if (deadline_lower > 0 && deadline_lower >= until)
		return; /* it wakes by itself in time */
	lf_ec_wake(&e->wake_ec);
}

int64_t lf_precise_hold_ns(void) { return PRECISE_HOLD_NS; }
