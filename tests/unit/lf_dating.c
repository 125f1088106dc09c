/*
 * The lock-free core's dating (src/lf/clock.c) keeps arms in order when the
 * calibration is old.
 *
 * An arm stamps the TSC; the thread that files it converts the stamp with
 * the calibration the timer thread last published, rounded up by a margin
 * that grows with the calibration's age (0.1 % of it, for NTP slew).  A
 * timer thread with nothing due sleeps, and publishes nothing meanwhile:
 * after 2 s the margin alone is 2 ms.  On the wheel, arms that spill (more
 * than a ring holds) are filed by the arming thread at once, into its own
 * wheel, against that old calibration (mpsc's go through the inbox to the
 * timer thread, which calibrates first).  Each converted stamp is capped
 * by a clock read taken after the arm, so it is dated no later than that
 * read, and the early timers stay ahead of a timer armed after them and
 * due 1.2 resolutions later, dated against a fresh calibration.  Without
 * the cap, 24 of the wheel's 32 (those that spilled) came 2 ms late and
 * ran after it.
 *
 * A round is judged only if the calibration did not change while the
 * first timers were armed (their spills were dated against the old one),
 * and the timer thread calibrated again well before they were due; an
 * unjudged round is retried, and at least one must be judged.  The 2 s
 * sleep is the workload (the calibration ageing), not a wait for state.
 * Where the timer thread polls every tick (LF_TW_FENCE) the calibration
 * cannot age: the test says so and exits 77 (skipped).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"
#include "lf/lf.h"

#define MS TMO_NSEC_PER_MSEC
#define SEC TMO_NSEC_PER_SEC
#define WAIT (30 * SEC)
#define AGE (2 * SEC)
#define EARLY_N (4 * LF_RING_SLOTS) /* most of them spill */
#define LEAD (200 * MS)
#define ROUNDS 3

static atomic_int next_seq;
static int seq_of[EARLY_N + 1];
static atomic_llong fired;

static void seq_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	seq_of[(int)(intptr_t)arg] = atomic_fetch_add(&next_seq, 1);
	atomic_fetch_add(&fired, 1);
}

static int64_t anchor_ns(struct tmo *e) { return atomic_load(&e->cal.ns); }

/* One round; returns 1 if judged (and checks its order), 0 if not. */
static int stale_round(const char *eng)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	struct tmo_timer t[EARLY_N + 1];
	memset(t, 0, sizeof t);
	atomic_store(&next_seq, 0);
	atomic_store(&fired, 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&e->tickw) & LF_TW_SLEEPING, WAIT));
	et_sleep_ns(AGE);
	int64_t anchor = anchor_ns(e), aged = tmo_now_ns() - anchor;
	for (int i = 0; i < EARLY_N; i++)
		CHECK_EQ(tmo_arm(e, &t[i], LEAD, seq_cb, (void *)(intptr_t)i), 0);
	int64_t armed = tmo_now_ns(); /* after every early arm: each is due by armed + LEAD */
	int judged = anchor_ns(e) == anchor && aged >= AGE;
	/* the late timer: dated against a calibration newer than this one */
	CHECK(ET_WAIT_UNTIL(anchor_ns(e) != anchor, WAIT));
	int64_t gap = e->resolution_ns * 6 / 5;
	int64_t late_due = armed + LEAD + gap, now = tmo_now_ns();
	int after = 0;
	if (now < late_due - LEAD / 2) {
		CHECK_EQ(tmo_arm(e, &t[EARLY_N], late_due - now, seq_cb, (void *)(intptr_t)EARLY_N),
		         0);
		CHECK(et_wait_ge(&fired, EARLY_N + 1, WAIT));
		for (int i = 0; i < EARLY_N; i++)
			after += seq_of[i] > seq_of[EARLY_N];
	} else { /* the timer thread took LEAD / 2 to run: too near the early ones' due */
		judged = 0;
		CHECK(et_wait_ge(&fired, EARLY_N, WAIT));
	}
	printf("  %s: calibration %.2f s old, %s: %d of %d early timers ran after the late one\n",
	       eng, (double)aged / SEC, judged ? "judged" : "not judged",
	       after, EARLY_N);
	if (judged)
		CHECK_EQ(after, 0);
	CHECK_EQ(tmo_destroy(&e), 0);
	return judged;
}

/* With LF_TW_FENCE (no membarrier; always under TSan) the timer thread
 * never sleeps longer than a tick, and calibrates each time: its
 * calibration cannot age, and there is nothing to judge.  Returns 1 then. */
static int fence_mode(const char *eng)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	int fence = (atomic_load(&e->tickw) & LF_TW_FENCE) != 0;
	CHECK_EQ(tmo_destroy(&e), 0);
	return fence;
}

static void test_stale_calibration(const char *eng)
{
	int judged = 0;
	for (int r = 0; r < ROUNDS && judged == 0; r++)
		judged += stale_round(eng);
	CHECK(judged > 0);
}

int main(void)
{
	const char *engines[] = {"mpsc", "wheel"};
	if (fence_mode(engines[0])) {
		printf("SKIPPED: the timer thread polls every tick (LF_TW_FENCE: no membarrier, "
		       "or TSan), so its calibration never ages\n");
		return 77;
	}
	for (int i = 0; i < 2; i++) {
		printf("engine %s\n", engines[i]);
		test_stale_calibration(engines[i]);
	}
	return TEST_EXIT();
}
