/*
 * mpsc's far arms and queues (src/lf/take.c, Far arms; src/lf/lf.h, the
 * record's queue), from outside the timer thread:
 *
 *  - held arms the timer thread took, cancelled within a sweep of their
 *    arm, were never filed: each is freed as dropped (judged when at
 *    least half the arms were that quick; retried otherwise);
 *  - far arms that live fire exactly once, never early;
 *  - arms made while the timer thread is parked overflow the thread's
 *    queue into the inbox, and the timer thread takes every one;
 *  - a parked timer thread holds no far arm.
 * Every wait is on state, bounded by a deadline far beyond need.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "engine_test.h"
#include "lf/debug.h"
#include "lf/lf.h"
#include "tmo/testing.h"

#define MS TMO_NSEC_PER_MSEC
#define SEC TMO_NSEC_PER_SEC
#define WAIT (30 * SEC) /* bounded waits: far beyond need, never hit when correct */

static const char *eng = "mpsc";

static struct tmo *make(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	return e;
}

static void no_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	abort(); /* never due in these tests */
}

/* Arm, asking again while the engine refuses for now (TMO_EAGAIN). */
static int arm_retry(struct tmo *e, struct tmo_timer *t, int64_t timeout, tmo_callback *cb)
{
	int rc;
	ET_WAIT_UNTIL((rc = tmo_arm(e, t, timeout, cb, NULL)) != TMO_EAGAIN, WAIT);
	return rc;
}

/* Every arm made since d0 taken by the timer thread: through the queues
 * or the inbox, or stolen from the ring. */
static int all_taken(struct tmo *e, const struct lf_debug *d0, long n)
{
	struct lf_debug d;
	return ET_WAIT_UNTIL((tmo__lf_debug(e, &d), d.inbox + d.stolen >= d0->inbox + d0->stolen + (uint64_t)n),
	                     WAIT);
}

/* The timer thread's sweep period (src/lf/take.c, FAR_SWEEP_NS). */
#define FAR_SWEEP (4 * MS)
#define FAR_N 256

static int64_t armed_at[FAR_N], cancelled_at[FAR_N];

/* One try: FAR_N arms due in 1 s, every one taken by the timer thread,
 * then all cancelled.  An arm it takes is filed at its second sweep, at
 * least FAR_SWEEP after it took it: an arm cancelled less than FAR_SWEEP
 * after it was made (from before its arm to after its cancel) was never
 * filed, and is freed as dropped (without far arms none is).  Judged when
 * at least half the arms were that quick (a sanitizer or a loaded machine
 * may make the round slower); returns 1 if judged. */
static int far_try(struct tmo *e, struct tmo_timer *t)
{
	struct lf_debug d0, d;
	tmo__lf_debug(e, &d0);
	for (long i = 0; i < FAR_N; i++) {
		armed_at[i] = tmo_now_ns();
		CHECK_EQ(arm_retry(e, &t[i], SEC, no_cb), 0);
	}
	CHECK(all_taken(e, &d0, FAR_N));
	long bad = 0;
	for (long i = 0; i < FAR_N; i++) {
		bad += tmo_cancel(e, &t[i]) != TMO_CANCEL_PREVENTED;
		cancelled_at[i] = tmo_now_ns();
	}
	CHECK_EQ(bad, 0);
	/* the sweeps free what was dropped */
	CHECK(ET_WAIT_UNTIL((tmo__lf_debug(e, &d), d.far == 0), WAIT));
	uint64_t dropped = d.dropped - d0.dropped, quick = 0;
	for (long i = 0; i < FAR_N; i++)
		quick += cancelled_at[i] - armed_at[i] < FAR_SWEEP;
	int judged = quick >= FAR_N / 2;
	printf("  %s: %d arms due in 1 s, all taken, then cancelled, %llu within %.0f ms of their "
	       "arm: %llu freed as dropped (%s)\n",
	       eng, FAR_N, (unsigned long long)quick, (double)FAR_SWEEP / MS,
	       (unsigned long long)dropped, judged ? "judged" : "not judged");
	CHECK(dropped >= quick); /* a bound on every try; judged ones make it tell */
	return judged;
}

static _Atomic int64_t far_fired_at[64];
static void far_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_store(&far_fired_at[(intptr_t)arg], tmo_now_ns());
}

static void test_far_arms(void)
{
	struct tmo *e = make();
	struct tmo_timer *t = calloc(FAR_N, sizeof *t);
	int judged = 0;
	for (int i = 0; i < 50 && !judged; i++)
		judged = far_try(e, t);
	CHECK(judged);
	/* far arms that are not cancelled fire, exactly once, never early */
	int64_t timeout = 30 * MS, start[64];
	for (intptr_t i = 0; i < 64; i++) {
		atomic_store(&far_fired_at[i], 0);
		start[i] = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &t[i], timeout, far_cb, (void *)i), 0);
	}
	for (int i = 0; i < 64; i++) {
		CHECK(ET_WAIT_UNTIL(atomic_load(&far_fired_at[i]) != 0, WAIT));
		CHECK(atomic_load(&far_fired_at[i]) >= start[i] + timeout);
		int rc = tmo_cancel(e, &t[i]); /* WAITED: still returning */
		CHECK(rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED);
	}
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(tmo_destroy(&e), 0);
	free(t);
}


/* The queue overflows into the inbox while the timer thread is parked;
 * parking files every far arm. */
static void test_overflow_and_park(void)
{
	struct tmo *e = make();
	long n = 3 * LF_Q_SLOTS;
	struct tmo_timer *t = calloc((size_t)n, sizeof *t);
	struct lf_debug d0, d;
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	tmo__lf_debug(e, &d0);
	for (long i = 0; i < n; i++)
		CHECK_EQ(arm_retry(e, &t[i], SEC, no_cb), 0);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK(all_taken(e, &d0, n)); /* none lost in the overflow */
	tmo__lf_debug(e, &d);
	printf("  %s: %ld arms while parked, all taken; %llu far arms held\n", eng, n,
	       (unsigned long long)d.far);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	tmo__lf_debug(e, &d);
	CHECK_EQ(d.far, 0); /* filed when it parked */
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	long bad = 0;
	for (long i = 0; i < n; i++)
		bad += tmo_cancel(e, &t[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(tmo_destroy(&e), 0);
	free(t);
}

int main(void)
{
	printf("engine %s\n", eng);
	RUN(test_far_arms);
	RUN(test_overflow_and_park);
	return TEST_EXIT();
}
