/*
 * The lock-free core's dating (src/lf/clock.c) keeps arms in order when
 * the timer thread has not run for a while.
 *
 * An arm stamps the TSC; whoever files it converts the stamp from a (TSC,
 * clock) pair of the timer thread's calibration, rounded up by a margin
 * that grows with the distance from that pair (0.1 %, for NTP slew).  Two
 * rules keep that distance short, each shown by rounds below (2 s each,
 * per engine, the timer thread not running meanwhile):
 *
 *   asleep  A sentinel timer keeps the timer thread asleep 2 s past its
 *           calibration.  An arm made then reads the clock instead of
 *           stamping the TSC (the calibration is older than lf_fresh_ns()),
 *           and does not wake the thread (due after the sentinel): it
 *           calibrates exactly once before the sentinel runs.
 *   parked  The same with the thread held at its park hook (awake, not
 *           asleep: arms take the fast path), and held 100 ms more after
 *           the arms.
 *   held    The arms are made just after a calibration (they stamp the
 *           TSC), then the thread is held 2 s, and calibrates again before
 *           it files them: they are converted from the pair before, the
 *           one they were made under.
 *
 * Each round arms 32 early timers (24 spill out of the ring), lets the
 * timer thread calibrate again, then arms a late timer due 1.2 resolutions
 * after every early one: all 32 must run before it.  Without the first
 * rule asleep and parked failed (mpsc 32 of 32 after the late timer, the
 * wheel 8, its ring; its spills are capped by the arming thread's clock
 * read); converting from the latest pair only, held failed the same way.
 *
 * A round is judged if its arms were made as it says (2 s past the
 * calibration; within lf_fresh_ns() less 1 ms of it) and the late timer could
 * be armed well before they were due; an unjudged round is retried, and at
 * least one must be judged.  The 2 s sleeps are the workload, not waits
 * for state.  Where the timer thread polls every tick (LF_TW_FENCE: no
 * membarrier, or TSan) it never sleeps or ages its calibration: the test
 * says so and exits 77 (skipped).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"
#include "lf_test.h"
#include "lf/clock.h"
#include "tmo/testing.h"

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
/* how many times the timer thread has calibrated */
static uint32_t calibrations(struct tmo *e) { return atomic_load(&e->cal.seq) / 2; }

struct sentinel {
	struct tmo_timer t;
	struct tmo *e;
	uint32_t calibrations; /* when it ran */
	atomic_int ran;
};

static void sentinel_cb(struct tmo_timer *t, void *arg)
{
	struct sentinel *s = tmo_container_of(t, struct sentinel, t);
	(void)arg;
	s->calibrations = calibrations(s->e);
	atomic_store(&s->ran, 1);
}

struct round {
	const char *eng, *kind;
	struct tmo *e;
	struct tmo_timer t[EARLY_N + 1];
	int64_t aged;    /* the calibration's age when the early timers were armed */
	int64_t timeout; /* theirs */
	int64_t armed;   /* a clock read after the last of them */
	int exposed;     /* their dating met what the round is about */
};

static void round_begin(struct round *r, const char *eng, const char *kind)
{
	memset(r, 0, sizeof *r);
	r->eng = eng;
	r->kind = kind;
	atomic_store(&next_seq, 0);
	atomic_store(&fired, 0);
	CHECK_EQ(tmo_create(eng, NULL, &r->e), 0);
}

static void arm_early(struct round *r, int64_t timeout)
{
	r->aged = tmo_now_ns() - anchor_ns(r->e);
	r->timeout = timeout;
	for (int i = 0; i < EARLY_N; i++)
		CHECK_EQ(tmo_arm(r->e, &r->t[i], timeout, seq_cb, (void *)(intptr_t)i), 0);
	r->armed = tmo_now_ns();
}

/* After the timer thread calibrated again: the late timer, then the order.
 * Returns 1 if judged. */
static int round_end(struct round *r)
{
	int64_t gap = r->e->resolution_ns * 6 / 5;
	int64_t late_due = r->armed + r->timeout + gap, now = tmo_now_ns();
	int judged = r->exposed && now < late_due - LEAD / 2, after = 0;
	if (now < late_due) {
		CHECK_EQ(tmo_arm(r->e, &r->t[EARLY_N], late_due - now, seq_cb,
		                 (void *)(intptr_t)EARLY_N),
		         0);
		CHECK(et_wait_ge(&fired, EARLY_N + 1, WAIT));
		for (int i = 0; i < EARLY_N; i++)
			after += seq_of[i] > seq_of[EARLY_N];
	} else {
		CHECK(et_wait_ge(&fired, EARLY_N, WAIT));
	}
	printf("  %s %s: armed %.3f ms after a calibration, %s: %d of %d early timers ran after "
	       "the late one\n",
	       r->eng, r->kind, (double)r->aged / MS, judged ? "judged" : "not judged", after,
	       EARLY_N);
	if (judged)
		CHECK_EQ(after, 0);
	CHECK_EQ(tmo_destroy(&r->e), 0);
	return judged;
}

/* The timer thread asleep until the sentinel, 2 s after its calibration:
 * the early timers are dated by the clock, and do not wake it. */
static int asleep_round(const char *eng)
{
	static struct round r;
	round_begin(&r, eng, "asleep");
	struct sentinel s = {.t = TMO_TIMER_INIT, .e = r.e};
	int64_t t0 = tmo_now_ns(), sentinel_due = t0 + AGE + LEAD;
	CHECK_EQ(tmo_arm(r.e, &s.t, AGE + LEAD, sentinel_cb, NULL), 0);
	CHECK(ET_WAIT_UNTIL((atomic_load(&r.e->tickw) & LF_TW_SLEEPING) &&
	                        atomic_load(&r.e->sleep_until) != INT64_MAX,
	                    WAIT));
	et_sleep_ns(t0 + AGE - tmo_now_ns());
	uint32_t cal = calibrations(r.e);
	arm_early(&r, sentinel_due + LEAD - tmo_now_ns());
	r.exposed = r.aged >= AGE - LEAD;
	CHECK(ET_WAIT_UNTIL(atomic_load(&s.ran), WAIT));
	/* none of the early timers woke the thread: it calibrated once since,
	 * in the sentinel's round */
	CHECK_EQ(s.calibrations - cal, 1);
	return round_end(&r);
}

/* Hold the timer thread at its park hook; returns its calibrations so far. */
static uint32_t park(struct round *r)
{
	CHECK_EQ(tmo_testing_park(r->e, 1), 0);
	return calibrations(r->e);
}

/* Release it, and wait until it has calibrated again (after `cal`). */
static void unpark(struct round *r, uint32_t cal)
{
	CHECK_EQ(tmo_testing_park(r->e, 0), 0);
	CHECK(ET_WAIT_UNTIL(calibrations(r->e) != cal, WAIT));
}

/* The timer thread parked (not asleep: arms take the fast path) for 2 s,
 * and for LEAD / 2 more after the early timers: they are dated by the
 * clock. */
static int parked_round(const char *eng)
{
	static struct round r;
	round_begin(&r, eng, "parked");
	uint32_t cal = park(&r);
	et_sleep_ns(AGE);
	arm_early(&r, 2 * LEAD);
	r.exposed = r.aged >= AGE - LEAD;
	et_sleep_ns(LEAD / 2);
	unpark(&r, cal);
	return round_end(&r);
}

/* The early timers armed just after a calibration (they stamp the TSC),
 * then the timer thread held 2 s before it files them, after calibrating
 * again: they are dated from the calibration before that one. */
static int held_round(const char *eng)
{
	static struct round r;
	round_begin(&r, eng, "held");
	unpark(&r, park(&r)); /* a round, so a calibration, just before the park */
	uint32_t cal = park(&r);
	arm_early(&r, AGE + LEAD);
	r.exposed = r.aged + MS < lf_fresh_ns(r.e); /* all 32 stamp the TSC */
	et_sleep_ns(AGE);
	unpark(&r, cal);
	return round_end(&r);
}

static void judged_once(int (*round)(const char *), const char *eng)
{
	int judged = 0;
	for (int i = 0; i < ROUNDS && judged == 0; i++)
		judged += round(eng);
	CHECK(judged > 0);
}

int main(void)
{
	const char *engines[] = {"mpsc", "wheel"};
	/* with LF_TW_FENCE the timer thread never sleeps longer than a tick,
	 * and calibrates each time: there is nothing to judge */
	if (lf_test_skip_if_fence("the timer thread polls every tick, so its calibration never ages"))
		return 77;
	if (!tmo__lf_use_tsc) { /* decided once, by the engine the probe made */
		printf("SKIPPED: arms stamp with the clock here (no usable counter, or "
		       "TMO_LF_CLOCK=1): nothing is dated by a calibration\n");
		return 77;
	}
	for (int i = 0; i < 2; i++) {
		printf("engine %s\n", engines[i]);
		judged_once(asleep_round, engines[i]);
		judged_once(parked_round, engines[i]);
		judged_once(held_round, engines[i]);
	}
	return TEST_EXIT();
}
