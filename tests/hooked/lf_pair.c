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
 * Built again with the wide pair published (TMO_LF_PLANT_WIDE_PAIR:
 * hooked/lf_pair-planted-wide), which must report the wide error.  Where
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
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define WIDE (300 * TMO_NSEC_PER_USEC)
#define PAIRS 15
#define ERR_MAX (25 * TMO_NSEC_PER_USEC)

static atomic_int widen;
static atomic_llong pairs;

/* The pair hook: while `widen`, the clock read comes WIDE after the first
 * TSC read (a busy wait: the thread stays on its CPU, as a preempted one
 * would not, but the pair is as wide). */
static void widen_pair(struct tmo *e)
{
	(void)e;
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

int main(void)
{
	tmo_testing_timely_timer(1);
	struct tmo *probe = NULL; /* the first engine decides counter or clock */
	if (tmo_create("mpsc", NULL, &probe) != 0 || tmo_destroy(&probe) != 0) {
		fprintf(stderr, "lf_pair: cannot create an mpsc engine\n");
		return 1;
	}
	if (!tmo__lf_use_tsc) {
		printf("SKIPPED: arms stamp with the clock here (no usable counter, or "
		       "TMO_LF_CLOCK=1): no calibration pairs\n");
		return 77;
	}
	atomic_store(&tmo__lf_hook_pair, widen_pair);
	RUN(wide_pairs_mpsc);
	RUN(wide_pairs_wheel);
	return TEST_EXIT();
}
