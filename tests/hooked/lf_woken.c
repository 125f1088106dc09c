/*
 * One wake-up for a sleeping timer thread, however many arms come before
 * it runs (src/lf/ec.c, tmo__lf_wake_for).  An arm due before the
 * thread's wake-up wakes it: an add to its event count, a locked
 * instruction.  Woken, the thread may not run for a while (its CPU busy);
 * until it publishes its next tick the word still says SLEEPING, and
 * every arm due before the wake-up it announced would add again.  The
 * first waker clears SLEEPING instead, so the arms after it see a thread
 * that is awake.
 *
 * mpsc and the wheel.  The timer thread asleep with nothing armed, held
 * at the hook it reaches when its sleep ends (src/lf/hook.h, woke):
 * woken, and not running its round.  The test arms A, due in NEAR: A
 * adds one to the event count, and the thread wakes into the hook.  Then
 * MORE arms due in NEAR: none may add to the count.  Released, the
 * thread fires all of them, none early.
 *
 * Built again with the clear left out (TMO_LF_PLANT_WAKE_EACH:
 * hooked/lf_woken-planted-each), which must report the arms after A
 * waking it again.
 *
 * The case needs the thread woken by A.  Its wait may end by itself
 * between the test's look and A's add (a spurious return): it then runs a
 * round, takes A and sleeps until A is due, and is held when that sleep
 * ends, its sleep_until at A's deadline; the arms after A are due after
 * it and wake nothing, planted or not (the planted build passed mpsc in 2
 * runs of 200 beside a CI run, its sleep_until -2.5 to +1.3 ms from now).
 * That try is not judged: the sleep_until it looked at must be the one
 * it is held with, else the case is tried again with a new engine.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "hold.h"
#include "lf/ec.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define NEAR (2 * TMO_NSEC_PER_MSEC)
#define MORE 64
#define TRIES 10

struct woken {
	struct tmo_timer t;
	int64_t armed; /* clock read before the arm */
	_Atomic int64_t fired_at;
};
static atomic_int fired;

static void woken_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct woken *w = tmo_container_of(t, struct woken, t);
	atomic_store(&w->fired_at, tmo_now_ns());
	atomic_fetch_add(&fired, 1);
}

/* 1: judged; 0: the thread was not woken by A (above), nothing judged. */
static int woken_try(const char *engine)
{
	static struct woken w[1 + MORE];
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(engine, NULL, &e), 0);
	hold_reset();
	atomic_store(&fired, 0);
	/* asleep, with nothing to wake it for a long while */
	int64_t until = 0;
	CHECK(ET_WAIT_UNTIL((atomic_load(&e->tickw) & LF_TW_SLEEPING) &&
	                        (until = atomic_load(&e->sleep_until)) > tmo_now_ns() + 10 * NEAR,
	                    WAIT));
	atomic_store(&hold, HOLD_WOKE);
	for (int i = 0; i <= MORE; i++) {
		tmo_timer_init(&w[i].t);
		atomic_store(&w[i].fired_at, 0);
	}
	uint32_t v0 = tmo__lf_ec_value(&e->wake_ec);
	w[0].armed = tmo_now_ns();
	CHECK_EQ(tmo_arm(e, &w[0].t, NEAR, woken_cb, NULL), 0);
	uint32_t v1 = tmo__lf_ec_value(&e->wake_ec);
	if (v1 - v0 != 1)
		fprintf(stderr, "woken/%s: A added %u to the event count, not 1\n", engine, v1 - v0);
	CHECK_EQ(v1 - v0, 1);
	/* woken, and held before its next round */
	CHECK(ET_WAIT_UNTIL(atomic_load(&held), WAIT));
	if (atomic_load(&e->sleep_until) != until) { /* a round ran since the look */
		fprintf(stderr, "woken/%s: woken before A (a round since); tried again\n", engine);
		atomic_store(&release, 1);
		CHECK(ET_WAIT_UNTIL(atomic_load(&fired) == 1, WAIT));
		CHECK_EQ(tmo_destroy(&e), 0);
		return 0;
	}
	for (int i = 1; i <= MORE; i++) {
		w[i].armed = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &w[i].t, NEAR, woken_cb, NULL), 0);
	}
	uint32_t again = tmo__lf_ec_value(&e->wake_ec) - v1;
	if (again != 0)
		fprintf(stderr, "woken/%s: %u of %d arms after A woke it again\n", engine, again, MORE);
	CHECK_EQ(again, 0);
	atomic_store(&release, 1);
	CHECK(ET_WAIT_UNTIL(atomic_load(&fired) == 1 + MORE, WAIT));
	int early = 0;
	for (int i = 0; i <= MORE; i++)
		early += atomic_load(&w[i].fired_at) < w[i].armed + NEAR;
	if (early != 0)
		fprintf(stderr, "woken/%s: %d of %d timers fired early\n", engine, early, 1 + MORE);
	CHECK_EQ(early, 0);
	CHECK_EQ(tmo_destroy(&e), 0);
	return 1;
}

static void woken_case(const char *engine)
{
	int judged = 0;
	for (int i = 0; i < TRIES && !judged; i++)
		judged = woken_try(engine);
	if (!judged)
		fprintf(stderr, "woken/%s: woken before A in all %d tries\n", engine, TRIES);
	CHECK(judged);
}

static void woken_mpsc(void) { woken_case("mpsc"); }
static void woken_wheel(void) { woken_case("wheel"); }

int main(void)
{
	atomic_store(&tmo__lf_hook_woke, hold_woke);
	RUN(woken_mpsc);
	RUN(woken_wheel);
	return TEST_EXIT();
}
