/*
 * Far arms let the timer thread sleep (src/lf/timer.c, Lazy).
 *
 * While this thread keeps arming and cancelling 1 s timeouts (the seed's
 * pair: they die in its ring, or the timer thread steals one and the
 * cancel finds it in that thread's base), no timer is due before the
 * timer thread's calibration needs renewing.  So the thread announces a
 * sleep (LF_TW_SLEEPING) and stays asleep between its calibrations, and
 * the arms made during such a sleep do not wake it: neither the arms
 * (due after its wake-up: arm.c, arm_asleep) nor the cancels of the arms
 * it stole (freed at its next look: cancel.c; also tried alone, on an arm
 * held until it is stolen).  The looks cover eight of its longest sleeps
 * (lf_lazy_ns).  Then a timer due at once, armed while it sleeps, wakes
 * it: the arm asks for a wake-up (the event count it sleeps on goes up
 * before the arm returns), and the timer runs.
 *
 * Before Lazy the thread polled every tick while any arm came (mpsc every
 * 50 us): the arms found it asleep only when this thread was preempted for
 * several ticks, far less than half of the looks below.  Exits 77 where
 * arms fence (LF_TW_FENCE: no membarrier, TSan, TMO_LF_FENCE=1): the
 * thread then never sleeps longer than a tick.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "lf_test.h"
#include "lf/clock.h"
#include "lf/debug.h"
#include "lf/ec.h"
#include "lf/lf.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define BATCH 256 /* pairs between two looks at the tick word */

static atomic_llong fired;

static void never_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&fired, 1000000); /* a far timeout, cancelled */
}

static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&fired, 1);
}

static int asleep(struct tmo *e)
{
	return (atomic_load(&e->tickw) & LF_TW_SLEEPING) != 0;
}

/* The thread asleep in a sleep no longer than lf_lazy_ns past its tick
 * (one it takes while arms keep coming): until when (0: not so). */
static int64_t lazy_until(struct tmo *e)
{
	uint64_t tw = atomic_load(&e->tickw);
	int64_t until = atomic_load(&e->sleep_until), at = atomic_load(&e->tick_at);
	return (tw & LF_TW_SLEEPING) && atomic_load(&e->tickw) == tw && until <= at + lf_lazy_ns(e)
	           ? until
	           : 0;
}

/* tmo_arm, asked again every 100 us while mpsc refuses for capacity
 * (TMO_EAGAIN: its inbox INBOX_MAX behind, its timer thread starved, as
 * beside the other tests of ctest -j2), as an application would; counted
 * in `refused` (a refusal wakes the thread: a batch with one is not
 * judged).  A refusal that outlasts WAIT is returned. */
static long refused;
static int arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb)
{
	int rc = tmo_arm(e, t, timeout_ns, cb, NULL);
	if (rc == TMO_EAGAIN) {
		refused++;
		ET_WAIT_UNTIL((rc = tmo_arm(e, t, timeout_ns, cb, NULL)) != TMO_EAGAIN, WAIT);
	}
	return rc;
}

/* BATCH seed pairs; returns 1 if every arm was taken and every cancel
 * prevented its timer. */
static int pairs(struct tmo *e, struct tmo_timer *t)
{
	int ok = 1;
	for (int i = 0; i < BATCH; i++) {
		int a = arm(e, t, TMO_NSEC_PER_SEC, never_cb);
		int c = tmo_cancel(e, t);
		if (a != 0 || c != TMO_CANCEL_PREVENTED) {
			fprintf(stderr, "pairs: arm %s, cancel %s\n", tmo_errname(a), tmo_errname(c));
			ok = 0;
		}
	}
	return ok;
}

/* Seed pairs until the timer thread sleeps with `margin` or more to go. */
static int until_asleep(struct tmo *e, struct tmo_timer *t, int64_t margin)
{
	int ok = 1;
	int64_t end = tmo_now_ns() + WAIT;
	while (tmo_now_ns() < end) {
		ok &= pairs(e, t);
		if (asleep(e) && atomic_load(&e->sleep_until) > tmo_now_ns() + margin)
			break;
	}
	return ok;
}

static void lazy(const char *eng, long min_looks)
{
	struct tmo *e = NULL;
	refused = 0;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	if (e == NULL)
		return;
	struct tmo_timer t, near;
	tmo_timer_init(&t);
	tmo_timer_init(&near);
	atomic_store(&fired, 0);
	/* it first polls a few ticks, then finds nothing due soon */
	int ok = until_asleep(e, &t, 0);
	CHECK(asleep(e));
	if (!asleep(e)) {
		tmo_destroy(&e);
		return;
	}
	/* Several of its sleeps, each to its next calibration.  A batch is
	 * judged when it began in such a sleep and ended before its wake-up
	 * (so within it: nothing else wakes it here): then no pair of it may
	 * have asked a wake-up.  (A round that found no arm, this thread
	 * preempted under load, sleeps until the earliest deadline; the next
	 * arms wake it, rightly, and are not judged.) */
	int64_t end = tmo_now_ns() + 8 * lf_lazy_ns(e);
	long looks = 0, seen = 0, judged_looks = 0, woken_looks = 0;
	while (looks < min_looks || tmo_now_ns() < end) {
		int64_t until = lazy_until(e);
		uint32_t v = tmo__lf_ec_value(&e->wake_ec);
		long r = refused;
		ok &= pairs(e, &t);
		seen += asleep(e);
		looks++;
		if (until != 0 && tmo_now_ns() < until && refused == r) {
			judged_looks++;
			woken_looks += tmo__lf_ec_value(&e->wake_ec) != v;
		}
	}
	CHECK(ok);
	/* The cancel of a far arm it stole, made in such a sleep (arms keep
	 * coming meanwhile), does not wake it: the node is freed at its next
	 * look (judged as the batches). */
	int held_judged = 0, held_woke = 0;
	for (int a = 0; a < 40 && held_judged < 3; a++) {
		struct lf_debug d;
		tmo__lf_debug(e, &d);
		uint64_t stolen = d.stolen;
		CHECK_EQ(arm(e, &near, 60 * TMO_NSEC_PER_SEC, never_cb), 0);
		int64_t end2 = tmo_now_ns() + WAIT, until = 0;
		while (tmo_now_ns() < end2 && (tmo__lf_debug(e, &d), d.stolen == stolen))
			ok &= pairs(e, &t);
		while (tmo_now_ns() < end2 &&
		       ((until = lazy_until(e)) == 0 || until <= tmo_now_ns() + TMO_NSEC_PER_MSEC))
			ok &= pairs(e, &t);
		uint32_t v1 = tmo__lf_ec_value(&e->wake_ec);
		CHECK_EQ(tmo_cancel(e, &near), TMO_CANCEL_PREVENTED);
		uint32_t asked = tmo__lf_ec_value(&e->wake_ec) - v1;
		if (until != 0 && tmo_now_ns() < until) {
			held_judged++;
			held_woke += asked >= 1;
		}
	}
	/* A timer due at once armed while it sleeps wakes it: judged when the
	 * arm returned before the wake-up the thread slept for, and then the
	 * arm must have asked, unless the thread published a tick meanwhile:
	 * a wake-up a cancel of the pairs before asked after the thread had
	 * read its count ends that sleep at once, the thread is awake when the
	 * arm looks, and the arm rightly asks nothing (ec.c, tmo__lf_wake_for).
	 * An arm that asked nothing while no tick came is a lost wake-up. */
	int judged = 0, woke = 0;
	for (int a = 0; a < 40 && judged < 3; a++) {
		ok &= until_asleep(e, &t, TMO_NSEC_PER_MSEC);
		uint64_t tw = atomic_load(&e->tickw);
		int64_t until = (tw & LF_TW_SLEEPING) ? atomic_load(&e->sleep_until) : 0;
		uint32_t v1 = tmo__lf_ec_value(&e->wake_ec);
		CHECK_EQ(arm(e, &near, 0, count_cb), 0);
		uint32_t asked = tmo__lf_ec_value(&e->wake_ec) - v1;
		if (until > 0 && tmo_now_ns() < until &&
		    (asked >= 1 || atomic_load(&e->tickw) >> LF_TW_SHIFT == tw >> LF_TW_SHIFT)) {
			judged++;
			woke += asked >= 1;
		}
		CHECK(et_wait_ge(&fired, a + 1, WAIT));
	}
	CHECK(ok);
	printf("  %s: %ld looks after %d pairs each (over %.0f ms) found the timer thread asleep "
	       "%ld times; %ld of %ld judged batches woke it; %d of %d judged cancels of a stolen "
	       "far arm woke it; %d of %d judged arms due at once woke it; %ld arms refused for "
	       "capacity (TMO_EAGAIN) and asked again\n",
	       eng, looks, BATCH, (double)(8 * lf_lazy_ns(e)) / 1e6, seen, woken_looks, judged_looks,
	       held_woke, held_judged, woke, judged, refused);
	CHECK(seen * 2 > looks);
	CHECK(judged_looks >= 16);
	CHECK_EQ(woken_looks, 0);
	CHECK(held_judged > 0);
	CHECK_EQ(held_woke, 0);
	CHECK(judged > 0);
	CHECK_EQ(woke, judged);
	CHECK(atomic_load(&fired) < 1000000); /* no far timeout ran */
	tmo_destroy(&e);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (lf_test_skip_if_fence("the timer thread never sleeps longer than a tick"))
		return 77;
	lazy("mpsc", et_scaled(2000, 200));
	lazy("wheel", et_scaled(2000, 200));
	return TEST_EXIT();
}
