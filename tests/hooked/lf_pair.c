/*
 * A calibration is never anchored on a wide (TSC, clock) pair
 * (src/lf/clock.c, tmo__lf_cal_update).  A pair's clock read lies
 * somewhere between its two TSC reads; preempted there (a loaded machine,
 * a stolen vCPU), the pair is hundreds of microseconds wide, and every
 * stamp converted from it carries that width as its margin: capped only by
 * a clock read after the arm (a starved timer thread's filing, long
 * after), such an arm is dated up to twice the width late, and runs after
 * arms due a resolution later (guarantee 4).
 *
 * The pair hook (src/lf/hook.h) holds the timer thread WIDE between the
 * TSC read and the clock read of every pair it takes, as such a
 * preemption would, until it has taken PAIRS of them (three calibrations'
 * five tries each).  The calibration published then must still have a
 * clock read error within ERR_MAX (a narrow pair: 20,000 ticks, 20 us on a
 * 1 GHz counter).  On mpsc and the wheel (one clock code; each its own
 * timer thread and calibration).
 *
 * An owner that dates its own arms beyond the published pair's window
 * takes a pair of its own (clock.c, own_pair), and dates the arms after
 * it from that pair, never early, within two floors (own_pairs below).
 *
 * Built again with the wide pair published (TMO_LF_PLANT_WIDE_PAIR:
 * hooked/lf_pair-planted-wide), which must report the wide error, and
 * with the owner's pair taken as read a floor earlier than it was
 * (TMO_LF_PLANT_OWN_PAIR_EARLY: hooked/lf_pair-planted-early), which
 * must report arms dated early.  Where
 * arms stamp with the clock (no usable counter, TMO_LF_CLOCK=1) there are
 * no pairs: skipped, saying so.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"
#include "lf/clock.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "lf/pool.h"
#include "need_tsc.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define WIDE (300 * TMO_NSEC_PER_USEC)
#define PAIRS 15
#define ERR_MAX (25 * TMO_NSEC_PER_USEC)

static atomic_int widen;
static atomic_llong pairs;
static atomic_llong all_pairs; /* every pair, narrow or not */

/* The pair hook: while `widen`, the clock read comes WIDE after the first
 * TSC read (a busy wait: the thread stays on its CPU, as a preempted one
 * would not, but the pair is as wide). */
static void widen_pair(struct tmo *e)
{
	(void)e;
	atomic_fetch_add(&all_pairs, 1);
	if (!atomic_load(&widen))
		return;
	int64_t until = tmo_now_ns() + WIDE;
	while (tmo_now_ns() < until)
		;
	atomic_fetch_add(&pairs, 1);
}

static void wide_pairs(const char *engine)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(engine, NULL, &e), 0);
	atomic_store(&pairs, 0);
	atomic_store(&widen, 1);
	/* the timer thread's rounds calibrate every 100 us (timely: it never
	 * sleeps); each calibration tries five pairs */
	CHECK(et_wait_ge(&pairs, PAIRS, WAIT));
	int64_t err = atomic_load(&e->cal.err);
	uint64_t rate = atomic_load(&e->cal.rate_fx);
	atomic_store(&widen, 0);
	if (err > ERR_MAX)
		fprintf(stderr, "lf_pair/%s: a calibration was published with a clock read error of "
		                "%.1f us (its pair %.0f us wide; a narrow one's is at most %.0f us)\n",
		        engine, (double)err / 1e3, (double)WIDE / 1e3, (double)ERR_MAX / 1e3);
	CHECK(err <= ERR_MAX);
	CHECK(rate != 0); /* the calibration of before, still there */
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void wide_pairs_mpsc(void) { wide_pairs("mpsc"); }
static void wide_pairs_wheel(void) { wide_pairs("wheel"); }

/* The owner's pair (clock.c, own_pair): the wheel's timer thread held at
 * its park hook, so that its calibration grows older than the window it
 * dates stamps in; then one thread makes LF_RING_SLOTS + OWN_N held arms.
 * Past the first LF_RING_SLOTS (its ring, full of live arms) the owner
 * files them itself: each new arm at once (arm.c, file_own), or, where
 * arms fence (no membarrier, TSan) and take the general path, the ring
 * slot's arm it evicts (base.c, tmo__lf_ring_evict).  Either way OWN_N
 * arms are dated by their owner.  The first takes a pair of its own, and
 * that pair dates the rest: at most OWN_PAIRS_MAX pairs for OWN_N arms
 * (before it, each read the clock), and each arm's deadline lies between
 * a clock read before it plus its timeout (never early) and one after it
 * plus two floors (no later than the timer thread's pairs date). */
#define OWN_N 512
#define OWN_ALL (LF_RING_SLOTS + OWN_N)
#define OWN_PAIRS_MAX 8
#define OWN_TIMEOUT (60 * TMO_NSEC_PER_SEC)

static void never_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	CHECK(0); /* 60 s: cancelled long before */
}

static void own_pairs(void)
{
	static struct tmo_timer t[OWN_ALL];
	static int64_t before[OWN_ALL], after[OWN_ALL];
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	for (int i = 0; i < OWN_ALL; i++)
		t[i] = (struct tmo_timer)TMO_TIMER_INIT;
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	/* the published pair too old for a stamp made now (its window, and
	 * the thread's copy of it, is near_ticks either side) */
	uint64_t cal_tsc = atomic_load(&e->cal.tsc), near = atomic_load(&e->cal.near_ticks);
	CHECK(ET_WAIT_UNTIL(lf_tsc() - cal_tsc > near + near / 8, WAIT));
	atomic_store(&all_pairs, 0);
	for (int i = 0; i < OWN_ALL; i++) {
		before[i] = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &t[i], OWN_TIMEOUT, never_cb, NULL), 0);
		after[i] = tmo_now_ns();
	}
	long long taken = atomic_load(&all_pairs);
	int filed = 0, early = 0, late = 0;
	int64_t lo = INT64_MAX, hi = INT64_MIN; /* deadline less timeout, less the read before */
	for (int i = 0; i < OWN_ALL; i++) {
		uint64_t w = atomic_load(lf_timer_word(&t[i]));
		struct lf_node *n = lf_node_at(e, lf_word_idx(w));
		if (lf_st_of(atomic_load(&n->state)) != LF_IN_STRUCT)
			continue;
		filed++;
		int64_t d = n->s.wheel.deadline;
		int64_t by = d - OWN_TIMEOUT - before[i];
		lo = by < lo ? by : lo;
		hi = by > hi ? by : hi;
		if (d < before[i] + OWN_TIMEOUT) {
			if (early++ == 0)
				printf("lf_pair/own: arm %d dated %.1f us early\n", i,
				       (double)(before[i] + OWN_TIMEOUT - d) / 1e3);
		} else if (d > after[i] + OWN_TIMEOUT + 2 * e->margin_ns) {
			if (late++ == 0)
				printf("lf_pair/own: arm %d dated %.1f us after the clock read after it "
				       "(two floors: %.1f us)\n",
				       i, (double)(d - after[i] - OWN_TIMEOUT) / 1e3,
				       2.0 * (double)e->margin_ns / 1e3);
		}
	}
	printf("lf_pair/own: %d of %d arms filed by their owner (%s); it took %lld pairs; dated "
	       "%.1f to %.1f us after the clock read before each; %d early, %d late\n",
	       filed, OWN_ALL,
	       atomic_load(&e->tickw) & LF_TW_FENCE ? "evicted: arms fence" : "at once", taken,
	       (double)lo / 1e3, (double)hi / 1e3, early, late);
	CHECK(filed >= OWN_N);
	CHECK_EQ(early, 0);
	CHECK_EQ(late, 0);
	CHECK(taken >= 1);
	CHECK(taken <= OWN_PAIRS_MAX);
	for (int i = 0; i < OWN_ALL; i++)
		CHECK_EQ(tmo_cancel(e, &t[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

int main(void)
{
	tmo_testing_timely_timer(1);
	int rc = need_tsc("lf_pair", "mpsc", "no calibration pairs");
	if (rc >= 0)
		return rc;
	atomic_store(&tmo__lf_hook_pair, widen_pair);
	RUN(wide_pairs_mpsc);
	RUN(wide_pairs_wheel);
	RUN(own_pairs);
	return TEST_EXIT();
}
