/*
 * An owner's copy of a calibration pair (src/lf/cal.h, lf_own_near): a
 * stamp within the copy's near window is dated from the copy, whatever the
 * timer thread has published since; one outside it takes the latest pair
 * again; one outside that too is left to the far path (0).  A stamp on
 * either side of a pair is converted from it.  Synthetic pairs, no
 * engine: the counter runs at 1 ns a tick here (rate 1.0 in 32.32).
 */
#include <stdatomic.h>
#include <stdint.h>

#include "check.h"
#include "lf/cal.h"

#define FLOOR 50000 /* the margin's floor, ns */
#define ONE ((uint64_t)1 << 32) /* rate 1.0: a tick is a nanosecond */

/* Publish (tsc, ns) with rate 1 and near window `near`, as the timer
 * thread does (clock.c, tmo__lf_cal_update): the count odd meanwhile. */
static void publish(struct lf_cal *c, uint64_t tsc, int64_t ns, uint64_t near)
{
	uint32_t s = atomic_load(&c->seq);
	atomic_store(&c->seq, s + 1);
	atomic_store(&c->tsc, tsc);
	atomic_store(&c->ns, ns);
	atomic_store(&c->rate_fx, ONE);
	atomic_store(&c->near_ticks, near);
	atomic_store(&c->seq, s + 2);
}

static void test_copy_kept_within_its_window(void)
{
	static struct lf_cal c;
	struct lf_cal_snap p = {0};
	publish(&c, 1000000, 5000000, 40000000);
	/* the empty copy converts nothing: it is taken */
	CHECK_EQ(lf_own_near(&c, &p, 1000500, FLOOR), 5000500 + FLOOR);
	CHECK_EQ(p.tsc, 1000000);
	/* a later pair, 10 ns off the first's line: a stamp within the copy's
	 * window is still dated from the copy, which is not taken again */
	publish(&c, 30000000, 34000010, 40000000);
	CHECK_EQ(lf_own_near(&c, &p, 20000000, FLOOR), 24000000 + FLOOR);
	CHECK_EQ(p.tsc, 1000000);
	/* past the copy's window: the latest pair */
	CHECK_EQ(lf_own_near(&c, &p, 50000000, FLOOR), 54000010 + FLOOR);
	CHECK_EQ(p.tsc, 30000000);
	/* before the pair, within its window: converted back from it */
	CHECK_EQ(lf_own_near(&c, &p, 29000000, FLOOR), 33000010 + FLOOR);
	/* outside both windows: the far path's (0), the copy the latest */
	CHECK_EQ(lf_own_near(&c, &p, 90000000, FLOOR), 0);
	CHECK_EQ(p.tsc, 30000000);
}

static void test_no_rate(void)
{
	static struct lf_cal c;
	struct lf_cal_snap p = {0};
	/* no calibration yet (rate 0, window 0): nothing is converted */
	CHECK_EQ(lf_own_near(&c, &p, 12345, FLOOR), 0);
	CHECK_EQ(lf_cal_near(&c, 12345, FLOOR), 0);
}

static void test_same_as_latest_pair(void)
{
	static struct lf_cal c;
	struct lf_cal_snap p = {0};
	publish(&c, 7000000, 9000000, 1000000);
	for (uint64_t st = 6000000; st <= 8000000; st += 250000)
		CHECK_EQ(lf_own_near(&c, &p, st, FLOOR), lf_cal_near(&c, st, FLOOR));
}

int main(void)
{
	RUN(test_copy_kept_within_its_window);
	RUN(test_no_rate);
	RUN(test_same_as_latest_pair);
	return TEST_EXIT();
}
