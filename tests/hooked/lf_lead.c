/*
 * The wheel's lead (src/lf/timer.c, Lead): its timer thread collects a
 * tick before the tick comes, and what it collected waits in its due
 * array until then.  The lead is forced here to LEAD_FORCED from the
 * round hook, far beyond any the engine takes, so that the timers wait
 * there long enough for the test to act on them:
 *   - the As, filed in the main thread's own wheel (its ring full of
 *     fillers), due in A_DUE: once the hook has seen every A in the due
 *     array, collected ahead, every other A is cancelled: each cancel must
 *     report TMO_CANCEL_PREVENTED and its callback never run;
 *   - then X, due more than the resolution before every A, armed into
 *     ticks the wheel has already passed: it must run before every A;
 *   - every A left runs once, and not before its deadline (a clock read
 *     before its arm, plus its timeout).
 * Built again with the due array's bound taken at the lead's horizon
 * (TMO_LF_PLANT_LEAD_EARLY: hooked/lf_lead-planted-early), which must
 * report As that ran early.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "lf/tt.h"
#include "tmo/testing.h"

#define MS TMO_NSEC_PER_MSEC
#define WAIT (30 * TMO_NSEC_PER_SEC)
#define LEAD_FORCED (5 * TMO_NSEC_PER_SEC)
#define A_DUE (2 * TMO_NSEC_PER_SEC)
#define X_DUE (50 * MS)
#define FILLER (60 * TMO_NSEC_PER_SEC)
#define NA 16
#define POKES 1000

struct at {
	struct tmo_timer t;
	int64_t lo;    /* a clock read before its arm, plus its timeout */
	int64_t ran;   /* the clock when its callback began */
	atomic_int seq; /* the order callbacks began in, from 1; 0: never */
	atomic_int fires;
};

static struct at as[NA], x;
static atomic_int seq;
static struct tmo *_Atomic lead_e;
static atomic_int ahead; /* As the last round found in the due array */

static void at_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct at *a = (struct at *)t;
	a->ran = tmo_now_ns();
	atomic_store(&a->seq, atomic_fetch_add(&seq, 1) + 1);
	atomic_fetch_add(&a->fires, 1);
}

/* On the timer thread, before each round's collect. */
static void round_hook(struct tmo *e)
{
	if (e != atomic_load(&lead_e))
		return;
	e->tt->lead = LEAD_FORCED;
	int k = 0;
	for (size_t i = 0; i < e->tt->due_n; i++) {
		uintptr_t p = (uintptr_t)e->tt->due[i].timer;
		k += p >= (uintptr_t)&as[0] && p < (uintptr_t)&as[NA];
	}
	atomic_store(&ahead, k);
}

static int any_a_ran(void)
{
	for (int i = 0; i < NA; i++)
		if (atomic_load(&as[i].fires) != 0)
			return 1;
	return 0;
}

static void lead(void)
{
	struct tmo *e;
	struct tmo_timer fill[LF_RING_SLOTS];
	static struct tmo_timer poke[POKES];
	atomic_int fill_fires = 0, pokes = 0;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	int64_t res = e->resolution_ns;
	atomic_store(&lead_e, e);
	atomic_store(&tmo__lf_hook_round, round_hook);
	/* the ring full: every A is filed at once in this thread's wheel */
	for (int i = 0; i < LF_RING_SLOTS; i++) {
		tmo_timer_init(&fill[i]);
		CHECK_EQ(tmo_arm(e, &fill[i], FILLER, et_count_cb, &fill_fires), 0);
	}
	for (int i = 0; i < NA; i++) {
		tmo_timer_init(&as[i].t);
		as[i].lo = tmo_now_ns() + A_DUE;
		CHECK_EQ(tmo_arm(e, &as[i].t, A_DUE, at_cb, NULL), 0);
	}
	/* a round after the one that collected them sees them all (each poke
	 * makes a round); a planted build fires them instead */
	int np = 0;
	while (atomic_load(&ahead) < NA && !any_a_ran() && np < POKES) {
		tmo_timer_init(&poke[np]);
		CHECK_EQ(tmo_arm(e, &poke[np], 1, et_count_cb, &pokes), 0);
		np++;
		CHECK(ET_WAIT_UNTIL(atomic_load(&pokes) == np, WAIT));
	}
	int64_t seen = tmo_now_ns();
	int collected = atomic_load(&ahead);
	printf("lf_lead: %d of %d As collected ahead, %.3f s before they are due\n", collected, NA,
	       (double)(as[0].lo - seen) / 1e9);
	int cancelled = 0;
	for (int i = 1; i < NA; i += 2) {
		int rc = tmo_cancel(e, &as[i].t);
		if (rc != TMO_CANCEL_PREVENTED && cancelled++ == 0)
			printf("lf_lead: the cancel of A %d, collected ahead, returned %s\n", i,
			       et_result_name(rc));
	}
	tmo_timer_init(&x.t);
	x.lo = tmo_now_ns() + X_DUE;
	CHECK_EQ(tmo_arm(e, &x.t, X_DUE, at_cb, NULL), 0);
	int64_t x_hi = tmo_now_ns() + X_DUE;
	CHECK(x_hi + res < as[0].lo);
	for (int i = 0; i < NA; i += 2)
		CHECK(ET_WAIT_UNTIL(atomic_load(&as[i].fires) != 0, WAIT + A_DUE));
	CHECK(ET_WAIT_UNTIL(atomic_load(&x.fires) != 0, WAIT));
	for (int i = 0; i < LF_RING_SLOTS; i++)
		CHECK_EQ(tmo_cancel(e, &fill[i]), TMO_CANCEL_PREVENTED);
	atomic_store(&tmo__lf_hook_round, NULL);
	CHECK_EQ(tmo_destroy(&e), 0);
	atomic_store(&lead_e, NULL);

	int early = 0, twice = 0, after_x = 0, odd_ran = 0;
	int64_t worst = 0;
	for (int i = 0; i < NA; i++) {
		int f = atomic_load(&as[i].fires);
		if (i % 2 == 1) {
			odd_ran += f != 0;
			continue;
		}
		twice += f > 1;
		if (f != 0 && as[i].ran < as[i].lo) {
			early++;
			if (as[i].lo - as[i].ran > worst)
				worst = as[i].lo - as[i].ran;
		}
		if (f != 0 && atomic_load(&as[i].seq) < atomic_load(&x.seq))
			after_x++;
	}
	if (early)
		printf("lf_lead: %d of %d As ran early, the worst %.3f ms before its deadline\n", early,
		       NA / 2, (double)worst / 1e6);
	if (after_x)
		printf("lf_lead: %d As ran before X, due %.3f ms before them\n", after_x,
		       (double)(as[0].lo - x_hi) / 1e6);
	if (odd_ran)
		printf("lf_lead: %d cancelled As ran\n", odd_ran);
	CHECK_EQ(collected, NA);
	CHECK(seen < as[0].lo);
	CHECK_EQ(cancelled, 0);
	CHECK_EQ(odd_ran, 0);
	CHECK_EQ(early, 0);
	CHECK_EQ(twice, 0);
	CHECK_EQ(after_x, 0);
	CHECK_EQ(atomic_load(&x.fires), 1);
	CHECK_EQ(atomic_load(&fill_fires), 0);
}

int main(void)
{
	RUN(lead);
	return TEST_EXIT();
}
