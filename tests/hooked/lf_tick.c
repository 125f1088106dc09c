/*
 * Order within one tick (guarantee 4) between arms dated two ways: the
 * timer thread's sort of a large due batch (src/lf/fire.c, near_sorted).
 *
 * A filed deadline is its arm's plus up to two floors: a stamp converted
 * from a pair is rounded up by a floor, a clock read is not.  So an arm A
 * dated from a pair and an arm B dated by a clock read, due just over the
 * resolution after A by the clock reads around the two arms, may be filed
 * in the same tick.  The wheel hands a tick's timers out in no order; a
 * batch in tick order was left unsorted, and B ran before A (expiry at
 * 1e5 under TSan, 2 runs in 80).
 *
 * The case: the wheel's timer thread parked just after it calibrated.
 * One thread arms PAIRS A timers while that calibration dates stamps,
 * each aimed a little over half a floor into a tick of its own, LEAD from
 * now; fillers push them out of the ring into the thread's own wheel,
 * where their filed deadlines are read.  Once the calibration is past its
 * fresh window (arms then read the clock), for each A whose tick began
 * after the clock read after its arm (plus its timeout), a B due the
 * resolution and a microsecond after that read plus the timeout, into
 * the same tick; fillers again.  A pair is judged when both were filed
 * in one tick, B due more than the resolution after A.  With every
 * deadline passed the thread is let go: its first round collects all of
 * them at once (more than the batch fire.c always sorts) and every
 * judged A must run before its B.  A try that judged too few pairs (its
 * arms slower than a floor) is retried.
 *
 * Built again with the tick order taken as enough
 * (TMO_LF_PLANT_TICK_ORDER: hooked/lf_tick-planted-tick), which must
 * report a B that ran before its A.  Where arms stamp with the clock (no
 * usable counter, TMO_LF_CLOCK=1) every arm is dated alike: skipped.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "lf/clock.h"
#include "lf/lf.h"
#include "lf/pool.h"
#include "need_tsc.h"
#include "tmo/testing.h"

#define MS TMO_NSEC_PER_MSEC
#define WAIT (30 * TMO_NSEC_PER_SEC)
#define LEAD (70 * MS)
#define PAIRS 80
#define JUDGED_MIN 4
#define TRIES 5
#define FILLER (60 * TMO_NSEC_PER_SEC)

struct arm_at {
	struct tmo_timer t;
	int64_t lo, hi; /* the clock reads around the arm, plus the timeout */
	int64_t filed;  /* its deadline in the wheel */
	int armed;
};

static struct arm_at a[PAIRS], b[PAIRS];
static struct tmo_timer fill[2 * LF_RING_SLOTS];
static atomic_int seq_next, seq_a[PAIRS], seq_b[PAIRS];
static atomic_llong fired;

static void a_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_store(&seq_a[(intptr_t)arg], atomic_fetch_add(&seq_next, 1) + 1);
	atomic_fetch_add(&fired, 1);
}
static void b_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_store(&seq_b[(intptr_t)arg], atomic_fetch_add(&seq_next, 1) + 1);
	atomic_fetch_add(&fired, 1);
}
static void never_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

static int arm_one(struct tmo *e, struct arm_at *x, int64_t timeout, tmo_callback *cb, intptr_t i)
{
	x->t = (struct tmo_timer)TMO_TIMER_INIT;
	int64_t before = tmo_now_ns();
	int rc = tmo_arm(e, &x->t, timeout, cb, (void *)i);
	x->hi = tmo_now_ns() + timeout;
	x->lo = before + timeout;
	x->armed = rc == 0;
	return rc;
}

/* LF_RING_SLOTS long arms from fill[k]: the arms before them leave the
 * ring for the thread's own wheel. */
static int push_out(struct tmo *e, int k)
{
	for (int i = 0; i < LF_RING_SLOTS; i++) {
		fill[k + i] = (struct tmo_timer)TMO_TIMER_INIT;
		int rc = tmo_arm(e, &fill[k + i], FILLER, never_cb, NULL);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The deadline x was filed at in the thread's wheel, 0 when it is not
 * there. */
static int64_t filed_at(struct tmo *e, struct arm_at *x)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(atomic_load(lf_timer_word(&x->t))));
	if (lf_st_of(atomic_load(&n->state)) != LF_IN_STRUCT)
		return 0;
	return n->s.wheel.deadline;
}

/* The start of the tick a deadline is filed in: (start, start + res]. */
static int64_t tick_start(struct tmo *e, int64_t d)
{
	return d - 1 - (d - 1 - e->origin_ns) % e->resolution_ns;
}

/* One try.  Returns the pairs judged; *wrong counts the judged Bs that ran
 * before their A. */
static int one_try(int *wrong)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	int64_t res = e->resolution_ns, floor_ns = e->margin_ns;
	atomic_store(&seq_next, 0);
	atomic_store(&fired, 0);
	for (int i = 0; i < PAIRS; i++)
		atomic_store(&seq_a[i], 0), atomic_store(&seq_b[i], 0), b[i].armed = 0;
	/* this thread's record, and a calibration published after seq0: read
	 * before the arm, which the timer thread sees (asleep, the arm wakes
	 * it; awake, the arm is activity) and calibrates after.  Read after
	 * it (before), a timer thread that calibrated in between and then
	 * slept, nothing pending, never published another: the wait below
	 * ran out in 1 of 6 runs under qemu (arm64). */
	uint32_t seq0 = atomic_load(&e->cal.seq);
	struct tmo_timer warm = TMO_TIMER_INIT;
	CHECK_EQ(tmo_arm(e, &warm, FILLER, never_cb, NULL), 0);
	CHECK_EQ(tmo_cancel(e, &warm), TMO_CANCEL_PREVENTED);
	CHECK(ET_WAIT_UNTIL(atomic_load(&e->cal.seq) != seq0 && atomic_load(&e->cal.rate_fx) != 0,
	                    WAIT));
	CHECK_EQ(tmo_testing_park(e, 1), 0);

	/* A: dated from a pair, aimed 0.6 floor into a tick each */
	int64_t t0 = tick_start(e, tmo_now_ns() + LEAD);
	for (int i = 0; i < PAIRS; i++) {
		int64_t aim = t0 + i * res + floor_ns * 6 / 10;
		CHECK_EQ(arm_one(e, &a[i], aim - floor_ns - tmo_now_ns(), a_cb, i), 0);
	}
	int fresh = lf_tsc() <= atomic_load(&e->fresh_until);
	CHECK_EQ(push_out(e, 0), 0);

	/* B: dated by a clock read, once the calibration is stale */
	CHECK(ET_WAIT_UNTIL(lf_tsc() > atomic_load(&e->fresh_until), WAIT));
	for (int i = 0; i < PAIRS; i++) {
		a[i].filed = filed_at(e, &a[i]);
		int64_t s = tick_start(e, a[i].filed);
		if (a[i].filed == 0 || a[i].hi + 1000 >= s || a[i].filed <= s)
			continue;
		int64_t want = a[i].hi + res + 1000, now = tmo_now_ns();
		if (want - now < 2 * res) /* too late for this one */
			continue;
		CHECK_EQ(arm_one(e, &b[i], want - now, b_cb, i), 0);
	}
	CHECK_EQ(push_out(e, LF_RING_SLOTS), 0);
	int judged = 0;
	int64_t last = 0;
	for (int i = 0; i < PAIRS; i++) {
		last = a[i].hi > last ? a[i].hi : last;
		if (!b[i].armed)
			continue;
		b[i].filed = filed_at(e, &b[i]);
		last = b[i].hi > last ? b[i].hi : last;
		if (b[i].filed != 0 && tick_start(e, b[i].filed) == tick_start(e, a[i].filed) &&
		    b[i].lo - a[i].hi > res)
			b[i].armed = 2, judged++;
	}
	long long want = PAIRS;
	for (int i = 0; i < PAIRS; i++)
		want += b[i].armed != 0;

	/* every deadline passed: the first round takes them all */
	while (tmo_now_ns() < last + 2 * res)
		et_sleep_ns(last + 2 * res - tmo_now_ns());
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK(et_wait_ge(&fired, want, WAIT));
	for (int i = 0; i < PAIRS; i++) {
		if (b[i].armed != 2 || atomic_load(&seq_a[i]) < atomic_load(&seq_b[i]))
			continue;
		if ((*wrong)++ == 0)
			printf("lf_tick: B %d ran before its A (#%d, #%d): due %.3f ms after it by the "
			       "clock reads around their arms, filed %.1f us after it, in one tick\n",
			       i, atomic_load(&seq_b[i]), atomic_load(&seq_a[i]),
			       (double)(b[i].lo - a[i].hi) / 1e6, (double)(b[i].filed - a[i].filed) / 1e3);
	}
	printf("lf_tick: %d of %d pairs judged (the As armed while the calibration was %s), "
	       "%d wrong\n",
	       judged, PAIRS, fresh ? "fresh" : "stale", *wrong);
	for (int i = 0; i < 2 * LF_RING_SLOTS; i++)
		CHECK_EQ(tmo_cancel(e, &fill[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_destroy(&e), 0);
	return fresh ? judged : 0;
}

static void tick_order(void)
{
	int wrong = 0, judged = 0;
	for (int k = 0; k < TRIES && judged < JUDGED_MIN; k++)
		judged += one_try(&wrong);
	CHECK(judged >= JUDGED_MIN);
	CHECK_EQ(wrong, 0);
}

int main(void)
{
	int rc = need_tsc("lf_tick", "wheel", "every arm is dated alike");
	if (rc >= 0)
		return rc;
	RUN(tick_order);
	return TEST_EXIT();
}
