/*
 * A TSC stamp older than the two latest calibration pairs is converted
 * from an older pair the timer thread kept (src/lf/cal.h, struct
 * lf_cal_hist), not from a pair long after it with 0.1 % of the distance
 * as margin.  Such a stamp is an arm whose owner was preempted between
 * taking it out of its ring and filing it, or that waited in the inbox
 * through a long round: beside CPU hogs, a quarter of a second (issue 19).
 *
 * A node is stamped, then the timer thread is kept calibrating (arms and
 * cancels keep it polling) until both its pairs are 250 ms after the
 * stamp; the node's deadline (timeout 0) must then lie within two floors
 * (the margin's least, 10 us on mpsc, 50 us on the wheel; what
 * src/lf/fire.c's hold allows a filing) after the clock read that
 * followed the stamp.  From the latest pairs alone it lies about 250 us
 * after it.
 * Skipped (77, with the reason) where arms stamp with the clock.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "lf/lf.h"

#define MS TMO_NSEC_PER_MSEC

static void noop_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

static void test_old_stamp(const char *eng)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	static struct lf_node n;
	int64_t before = tmo_now_ns();
	atomic_store(&n.s.q.stamp, lf_stamp());
	int64_t after = tmo_now_ns();
	atomic_store(&n.s.q.timeout, 0);
	/* the workload: arm+cancel pairs keep the timer thread's rounds (and
	 * its calibrations) coming; the state ends it */
	struct tmo_timer t = TMO_TIMER_INIT;
	int64_t give_up = after + 30 * TMO_NSEC_PER_SEC;
	while (atomic_load(&e->cal_prev.ns) < after + 250 * MS && tmo_now_ns() < give_up) {
		CHECK_EQ(tmo_arm(e, &t, 10 * MS, noop_cb, NULL), 0);
		CHECK_EQ(tmo_cancel(e, &t), TMO_CANCEL_PREVENTED);
	}
	CHECK(atomic_load(&e->cal_prev.ns) >= after + 250 * MS);
	CHECK(atomic_load(&e->cal_hist.n) >= 2);
	int64_t d = tmo__lf_node_deadline(e, &n, 0);
	printf("%s: a stamp %.0f ms older than both pairs, %llu kept: deadline %lld ns after the "
	       "clock read that followed it (floor %lld ns)\n",
	       eng, (double)(atomic_load(&e->cal_prev.ns) - after) / 1e6,
	       (unsigned long long)atomic_load(&e->cal_hist.n), (long long)(d - after),
	       (long long)e->margin_ns);
	CHECK(d >= before);
	CHECK(d - after <= 2 * e->margin_ns); /* two floors: what fire.c's hold allows */
	CHECK_EQ(tmo_destroy(&e), 0);
}

int main(void)
{
	struct tmo *probe; /* the first engine decides how arms stamp */
	CHECK_EQ(tmo_create("mpsc", NULL, &probe), 0);
	CHECK_EQ(tmo_destroy(&probe), 0);
	if (!tmo__lf_use_tsc) {
		printf("SKIP: arms stamp with the clock here (no usable counter, or TMO_LF_CLOCK=1)\n");
		return 77;
	}
	test_old_stamp("mpsc");
	test_old_stamp("wheel");
	return TEST_EXIT();
}
