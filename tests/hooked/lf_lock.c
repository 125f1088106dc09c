/*
 * A per-thread base's lock keeps the timer thread out while the owner is
 * inside, in the mode it runs in where membarrier is there (src/lf/base.h:
 * the owner's lock is a plain store and load, the timer thread pays the
 * barrier).  TSan checks the lock only where arms fence (it does not model
 * membarrier); this holds the owner inside its lock at a hook
 * (src/lf/hook.h) and makes the timer thread want the base, on every run.
 *
 * The wheel (mpsc has no per-thread bases).  The timer thread parked, the
 * owner arms P and fills its ring until P is spilled into its own base;
 * then it arms once more, and the spill of that arm is held inside the
 * base's lock.  Both spilling arms go the general path (hold.h,
 * go_general): the fast path would file them at once instead.  Another thread cancels P: P is in a base not its own, so
 * the cancel leaves it on the base's cancel stack for the base's next
 * holder, and the timer thread, which tidies such a stack, tries the lock
 * in every round.  Three rounds later P must still be in the base: the
 * timer thread did not take the lock the owner holds.  Released, the
 * owner tidies the stack itself as it leaves the lock: P is gone.
 *
 * Built again with the timer thread's lock planted blind to the owner
 * (TMO_LF_PLANT_LOCK_OTHER: hooked/lf_lock-planted-other), which must
 * report P taken out of the base while its owner held the lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "hold.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "lf/node.h"
#include "lf/pool.h"
#include "lf/schedule.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define LONG (60 * TMO_NSEC_PER_SEC)

static atomic_int fires; /* none of the test's timers may fire */

struct owner {
	struct tmo *e, *away;
	struct tmo_timer p, fill[LF_RING_SLOTS + 1];
	atomic_int phase; /* 1: P spilled; 2: the main thread says go on */
	int rc;
};

static void *owner_main(void *arg)
{
	struct owner *o = arg;
	owner_thread = 1;
	o->rc = tmo_arm(o->e, &o->p, LONG, et_count_cb, &fires);
	/* the ring's slots once round: the last arm, on the general path
	 * (hold.h, go_general), spills P into our base */
	for (int i = 0; i < LF_RING_SLOTS && o->rc == 0; i++) {
		if (i == LF_RING_SLOTS - 1)
			o->rc = go_general(o->away);
		if (o->rc == 0)
			o->rc = tmo_arm(o->e, &o->fill[i], LONG, et_count_cb, &fires);
	}
	atomic_store(&o->phase, 1);
	while (atomic_load(&o->phase) != 2)
		et_sleep_ns(100 * TMO_NSEC_PER_USEC);
	/* spills the first filler, held inside the lock */
	if (o->rc == 0)
		o->rc = go_general(o->away);
	if (o->rc == 0)
		o->rc = tmo_arm(o->e, &o->fill[LF_RING_SLOTS], LONG, et_count_cb, &fires);
	return NULL;
}

static void held_lock(void)
{
	struct owner o = {0};
	tmo_timer_init(&o.p);
	for (int i = 0; i <= LF_RING_SLOTS; i++)
		tmo_timer_init(&o.fill[i]);
	CHECK_EQ(tmo_create("wheel", NULL, &o.e), 0);
	CHECK_EQ(tmo_create("mpsc", NULL, &o.away), 0);
	CHECK_EQ(tmo_testing_park(o.e, 1), 0);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, owner_main, &o), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&o.phase) == 1, WAIT));
	CHECK_EQ(o.rc, 0);
	struct lf_node *n = node_of(o.e, &o.p);
	const struct lf_sched *sc = o.e->p->sched;
	/* spilled into its owner's base, not stolen (the thread is parked) */
	CHECK(lf_st_of(atomic_load(&n->state)) == LF_IN_STRUCT && sc->contains(n));
	atomic_store(&hold, HOLD_TRANSIT);
	atomic_store(&o.phase, 2);
	CHECK(ET_WAIT_UNTIL(atomic_load(&held), WAIT));
	CHECK_EQ(tmo_testing_park(o.e, 0), 0);
	CHECK_EQ(tmo_cancel(o.e, &o.p), TMO_CANCEL_PREVENTED);
	/* three whole rounds of the timer thread, each of which tries the lock */
	uint64_t k = rounds(o.e);
	CHECK(ET_WAIT_UNTIL(rounds(o.e) >= k + 4, WAIT));
	int inside = sc->contains(n);
	if (!inside)
		fprintf(stderr, "lf_lock: P was taken out of its base while its owner held the "
		                "base's lock\n");
	CHECK(inside);
	atomic_store(&release, 1);
	pthread_join(th, NULL);
	CHECK_EQ(o.rc, 0);
	/* the owner tidied the cancel stack as it left the lock */
	CHECK(!sc->contains(n));
	for (int i = 0; i <= LF_RING_SLOTS; i++)
		CHECK_EQ(tmo_cancel(o.e, &o.fill[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(atomic_load(&fires), 0);
	CHECK_EQ(tmo_destroy(&o.e), 0);
	CHECK_EQ(tmo_destroy(&o.away), 0);
}

int main(void)
{
	/* the timer thread never sleeps: its rounds keep coming while the
	 * test waits for them */
	tmo_testing_timely_timer(1);
	atomic_store(&tmo__lf_hook_transit, hold_transit);
	RUN(held_lock);
	return TEST_EXIT();
}
