/*
 * An arm that refills its node cache does not hold the timer thread's
 * rounds back (src/lf/arm.c, arm_general).  The fast path announces an
 * arm's lower bound in its record before it stamps it, and a round fires
 * nothing due at or after an announced bound (src/lf/timer.c, Order).  An
 * arm that finds its cache empty refills it, and a refill that grows the
 * pool faults its pages in, 13-25 us a page on the 2-vCPU AMD EPYC VM (a
 * step is up to 16 pages), or its thread is preempted there: with the
 * announcement up, every timer due after that arm's bound waited for it.
 * The announcement now comes down before the refill, and the arm
 * announces itself again when it goes the fast way after it.
 *
 * Each engine (mpsc, wheel): an owner thread arms held timers of 60 s
 * until its cache is empty, then arms X (due in 1 ms) and is held in the
 * refill (hook refill).  Meanwhile this thread arms Y, due 5 ms later: Y's
 * deadline is after X's bound, read before the owner was held.  Once a
 * round that began after Y was due has ended, Y must have run, the owner
 * still held.  Then the owner goes on: X is armed, and every timer is
 * fired or cancelled exactly once.  The waits are on state: the hook's
 * flag, the clock's absolute deadline, the timer thread's round count.
 * The timer thread never sleeps (tmo_testing_timely_timer), so that X
 * goes the fast way, which announces it: the owner checks that it may,
 * and the test reads the owner's announcement while it is held.  Skipped where no
 * arm goes that way: in fence mode (LF_TW_FENCE: no membarrier, or TSan)
 * and where arms stamp with the clock.
 * Built again with the announcement kept through the refill
 * (TMO_LF_PLANT_REFILL_ANNOUNCED: hooked/lf_refill-planted-announced),
 * which must report Y held back on both.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "hold.h"
#include "lf/clock.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "lf/rec.h"
#include "need_tsc.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define MSEC TMO_NSEC_PER_MSEC
enum { HELD_MAX = 4096 };

static atomic_int fired_y, fired_x;

static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void held_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

struct owner {
	struct tmo *e;
	struct tmo_timer held[HELD_MAX], x;
	struct lf_rec *rec;
	int nheld, bad, x_rc, empty, fast;
	atomic_int ready, go;
};

static void *owner_main(void *arg)
{
	struct owner *o = arg;
	/* held arms until the cache is empty: the next arm refills */
	while (o->nheld < HELD_MAX) {
		tmo_timer_init(&o->held[o->nheld]);
		if (tmo_arm(o->e, &o->held[o->nheld], 60 * TMO_NSEC_PER_SEC, held_cb, NULL) != 0) {
			o->bad++;
			break;
		}
		o->nheld++;
		if (tmo__lf_tls_hot.rec != NULL && tmo__lf_tls_hot.rec->cache == NULL)
			break;
	}
	o->empty = tmo__lf_tls_hot.rec != NULL && tmo__lf_tls_hot.rec->cache == NULL;
	o->rec = tmo__lf_tls_hot.rec;
	atomic_store(&o->ready, 1);
	while (!atomic_load(&o->go))
		et_sleep_ns(100 * TMO_NSEC_PER_USEC);
	/* X goes the fast way (arm.c, tmo__lf_arm): this record hot, the
	 * timer thread awake (it never sleeps here), no fence, the TSC */
	uint64_t tw = atomic_load(&o->e->tickw);
	o->fast = tmo__lf_tls_hot.id == o->e->base.id &&
	          (tw & (LF_TW_SLEEPING | LF_TW_FENCE)) == 0 && tmo__lf_use_tsc;
	owner_thread = 1;
	tmo_timer_init(&o->x);
	o->x_rc = tmo_arm(o->e, &o->x, 1 * MSEC, count_cb, &fired_x);
	owner_thread = 0;
	return NULL;
}

static void one(const char *eng)
{
	atomic_store(&fired_x, 0);
	atomic_store(&fired_y, 0);
	hold_reset();
	struct tmo *e = NULL;
	int made = tmo_create(eng, NULL, &e);
	CHECK_EQ(made, 0);
	if (made != 0)
		return;
	static struct owner o;
	o = (struct owner){.e = e};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, owner_main, &o), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&o.ready), WAIT));
	atomic_store(&hold, HOLD_REFILL);
	atomic_store(&o.go, 1);
	int in = ET_WAIT_UNTIL(atomic_load(&held), WAIT);
	struct tmo_timer y = TMO_TIMER_INIT;
	int y_rc = -1, judged = 0, ran = 0;
	int64_t announced = -1;
	if (in) {
		announced = o.rec != NULL ? atomic_load(&o.rec->transit) : -1;
		/* X's bound was read before the owner came to the refill: Y,
		 * armed after, is due 5 ms after it at least */
		y_rc = tmo_arm(e, &y, 5 * MSEC, count_cb, &fired_y);
		int64_t due = tmo_now_ns() + 5 * MSEC + e->resolution_ns;
		judged = round_after(e, due, &fired_y);
		ran = atomic_load(&fired_y);
	}
	atomic_store(&release, 1);
	CHECK_EQ(pthread_join(th, NULL), 0);
	if (!in)
		printf("refill/%s: the owner never came to its refill (%d held arms, cache %s, "
		       "fast way %s)\n",
		       eng, o.nheld, o.empty ? "empty" : "not empty", o.fast ? "open" : "closed");
	else if (!ran)
		printf("refill/%s: Y held back while an arm refilled its cache: not run after a round "
		       "that began after it was due (%d held arms before; X %s)\n",
		       eng, o.nheld, announced != 0 ? "announced" : "not announced");
	else
		printf("refill/%s: Y ran while an arm refilled its cache (%d held arms before; X %s)\n",
		       eng, o.nheld, announced != 0 ? "announced" : "not announced");
	CHECK(in);
	CHECK_EQ(o.bad, 0);
	CHECK(o.empty);
	CHECK(o.fast);
	CHECK_EQ(announced, 0);
	CHECK_EQ(y_rc, 0);
	CHECK(judged);
	CHECK(ran);
	CHECK_EQ(o.x_rc, 0);
	/* exactly once, nothing lost: X and Y fired once or are cancelled */
	int rc_y = tmo_cancel(e, &y), rc_x = tmo_cancel(e, &o.x);
	CHECK_EQ(atomic_load(&fired_y), rc_y == TMO_CANCEL_PREVENTED ? 0 : 1);
	CHECK_EQ(atomic_load(&fired_x), rc_x == TMO_CANCEL_PREVENTED ? 0 : 1);
	int bad = 0;
	for (int i = 0; i < o.nheld; i++)
		bad += tmo_cancel(e, &o.held[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void refill(void)
{
	one("mpsc");
	one("wheel");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int rc = need_fast_way("lf_refill", "mpsc", "no arm goes the fast way, which announces");
	if (rc >= 0)
		return rc;
	tmo_testing_timely_timer(1);
	atomic_store(&tmo__lf_hook_refill, hold_refill);
	RUN(refill);
	return TEST_EXIT();
}
