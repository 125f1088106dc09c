/*
 * What the shared contract tests cannot reach in the libevent engine:
 *  - never early for an arm made from another thread while a slow callback
 *    runs: without EVENT_BASE_FLAG_NO_CACHE_TIME libevent dates it with the
 *    time cached at the start of the loop iteration, and it fires early by
 *    as long as the callback has run;
 *  - never early against CLOCK_MONOTONIC for short timeouts: without
 *    EVENT_BASE_FLAG_PRECISE_TIMER libevent reads CLOCK_MONOTONIC_COARSE;
 *  - park holds the base lock: an arm from another thread blocks until the
 *    release, and park/unpark in quick succession does not hang;
 *  - destroy right after create (libevent clears a loopbreak requested
 *    before the loop starts; the engine must still stop);
 *  - held_bytes: records while pending, libevent's never-shrinking heap
 *    array after the cancels;
 *  - fork while the engine cannot be quiesced (parked: its thread holds the
 *    base lock; or a callback that outlasts the fork handler's bound): the
 *    child's destroy leaves libevent's base alone and returns, and the
 *    parent's engine is unharmed.  (The quiesced case, with every
 *    descriptor accounted for: tests/engine/lifecycle_fork.c.)
 *
 * Synchronised on state, never on a sleep: a callback's progress is a flag
 * it sets, "this thread is blocked" is its state in /proc/self/task.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

#define MS TMO_NSEC_PER_MSEC
#define LIVENESS (5 * TMO_NSEC_PER_SEC) /* a bound for "it happened", not a measurement */

static struct tmo *make(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("libevent", NULL, &e), 0);
	return e;
}

/* ---- never early for an arm made while a slow callback runs ------------------- */

static atomic_int slow_started, slow_armed;
static atomic_int late_done;
static _Atomic int64_t late_fired;

/* Runs 20 ms, lets the test arm, runs 20 ms more. */
static void slow_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	et_spin_ns(20 * TMO_NSEC_PER_MSEC);
	atomic_store(&slow_started, 1);
	while (!atomic_load(&slow_armed))
		;
	et_spin_ns(20 * TMO_NSEC_PER_MSEC);
}

static void late_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_store(&late_fired, tmo_now_ns());
	atomic_store(&late_done, 1);
}

/* A 30 ms arm made from this thread 20 ms (or more) into a callback that
 * runs 20 ms more after it: dated with the loop's cached time (the start of
 * the iteration, before the callback) it would fire right after the
 * callback, 10 ms or more early. */
static void test_arm_during_slow_callback_not_early(void)
{
	struct tmo *e = make();
	int early = 0;
	int64_t worst = INT64_MAX;
	for (int i = 0; i < 3; i++) {
		static struct tmo_timer slow, late;
		atomic_store(&slow_started, 0);
		atomic_store(&slow_armed, 0);
		atomic_store(&late_done, 0);
		CHECK_EQ(tmo_arm(e, &slow, 0, slow_cb, NULL), 0);
		CHECK(ET_WAIT_UNTIL(atomic_load(&slow_started) >= 1, LIVENESS));
		int64_t armed = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &late, 30 * TMO_NSEC_PER_MSEC, late_cb, NULL), 0);
		atomic_store(&slow_armed, 1);
		CHECK(ET_WAIT_UNTIL(atomic_load(&late_done) >= 1, LIVENESS));
		int64_t margin = atomic_load(&late_fired) - (armed + 30 * TMO_NSEC_PER_MSEC);
		early += margin < 0;
		if (margin < worst)
			worst = margin;
	}
	CHECK_EQ(early, 0);
	printf("  30 ms arm 20 ms into a 40 ms callback: 3 runs, %d early, smallest margin %+.1f us\n",
	       early, (double)worst / 1000);
	tmo_destroy(&e);
}

/* ---- never early against CLOCK_MONOTONIC, short timeouts ------------------------- */

enum { SHORT_N = 2000 };
struct shorty {
	struct tmo_timer t;
	int64_t armed, timeout;
	_Atomic int64_t fired;
};
static atomic_int short_done;

static void short_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct shorty *s = tmo_container_of(t, struct shorty, t);
	atomic_store(&s->fired, tmo_now_ns());
	atomic_fetch_add(&short_done, 1);
}

static void test_short_timeouts_not_early(void)
{
	struct tmo *e = make();
	static struct shorty s[SHORT_N];
	struct sk_rng rng;
	sk_rng_init(&rng, 42);
	for (int i = 0; i < SHORT_N; i++) {
		s[i].timeout = (int64_t)sk_below(&rng, 3000) * TMO_NSEC_PER_USEC; /* 0..3 ms */
		s[i].armed = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &s[i].t, s[i].timeout, short_cb, NULL), 0);
		if (i % 100 == 99)
			et_sleep_ns(MS); /* spread the deadlines over the clock's ticks */
	}
	CHECK(ET_WAIT_UNTIL(atomic_load(&short_done) >= SHORT_N, 2 * LIVENESS));
	int early = 0;
	int64_t worst = INT64_MAX;
	for (int i = 0; i < SHORT_N; i++) {
		int64_t margin = atomic_load(&s[i].fired) - (s[i].armed + s[i].timeout);
		early += margin < 0;
		if (margin < worst)
			worst = margin;
	}
	CHECK_EQ(early, 0);
	printf("  %d timeouts of 0..3 ms: %d early, smallest margin %+.1f us\n", SHORT_N, early,
	       (double)worst / 1000);
	tmo_destroy(&e);
}

/* ---- park holds the base lock ------------------------------------------------------ */

struct blocked_arm {
	struct tmo *e;
	struct tmo_timer t;
	atomic_int done, tid, released;
	int rc;
	int released_before_return;
	int64_t took;
};

static void nop_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

static void *arm_thread(void *arg)
{
	struct blocked_arm *b = arg;
	atomic_store(&b->tid, (int)gettid());
	int64_t t0 = tmo_now_ns();
	b->rc = tmo_arm(b->e, &b->t, 10 * TMO_NSEC_PER_SEC, nop_cb, NULL);
	b->took = tmo_now_ns() - t0;
	b->released_before_return = atomic_load(&b->released);
	atomic_store(&b->done, 1);
	return NULL;
}

static void test_park_blocks_arms(void)
{
	struct tmo *e = make();
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	static struct blocked_arm b;
	memset(&b, 0, sizeof b);
	b.e = e;
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, arm_thread, &b), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&b.tid) != 0, LIVENESS));
	CHECK(et_wait_blocked((pid_t)atomic_load(&b.tid), 3, LIVENESS)); /* on the base lock */
	CHECK_EQ(atomic_load(&b.done), 0);
	atomic_store(&b.released, 1);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	pthread_join(th, NULL);
	CHECK_EQ(b.rc, 0);
	CHECK_EQ(b.released_before_return, 1); /* it got through only after the release */
	CHECK_EQ(tmo_cancel(e, &b.t), TMO_CANCEL_PREVENTED);
	/* Quick succession: a park(1) that finds the thread still parked from
	 * the previous round must not wait for the base lock. */
	int64_t t0 = tmo_now_ns();
	for (int i = 0; i < 100; i++) {
		CHECK_EQ(tmo_testing_park(e, 1), 0);
		CHECK_EQ(tmo_testing_park(e, 0), 0);
	}
	CHECK(tmo_now_ns() - t0 < 10 * TMO_NSEC_PER_SEC);
	printf("  parked: an arm from another thread blocked %.1f ms, until the release\n",
	       (double)b.took / 1e6);
	tmo_destroy(&e);
}

/* ---- destroy right after create ------------------------------------------------------ */

static void test_create_destroy(void)
{
	int64_t base = tmo_testing_live_allocs();
	int64_t t0 = tmo_now_ns();
	for (int i = 0; i < 200; i++) {
		struct tmo *e = make();
		if (e == NULL)
			break;
		tmo_destroy(&e);
	}
	CHECK_EQ(tmo_testing_live_allocs(), base);
	printf("  200 create+destroy: %.0f us each\n", (double)(tmo_now_ns() - t0) / 200 / 1000);
}

/* ---- held bytes ------------------------------------------------------------------------ */

static void test_held_bytes(void)
{
	struct tmo *e = make();
	enum { N = 1000 };
	static struct tmo_timer t[N];
	for (int i = 0; i < N; i++)
		CHECK_EQ(tmo_arm(e, &t[i], 60 * TMO_NSEC_PER_SEC, nop_cb, NULL), 0);
	struct tmo_stats full, empty;
	tmo_stats(e, &full);
	for (int i = 0; i < N; i++)
		CHECK_EQ(tmo_cancel(e, &t[i]), TMO_CANCEL_PREVENTED);
	tmo_stats(e, &empty);
	CHECK_EQ(full.pending, N);
	CHECK_EQ(full.held_nodes, N);
	CHECK(full.held_bytes >= N * 64);
	CHECK_EQ(empty.pending, 0);
	CHECK_EQ(empty.held_nodes, 0);
	/* libevent's heap array stays at its peak: 1024 pointers for 1001 events. */
	CHECK_EQ(empty.held_bytes, 1024 * sizeof(void *));
	printf("  %d pending: %llu bytes; after cancelling all: %llu bytes (libevent's heap array)\n", N,
	       (unsigned long long)full.held_bytes, (unsigned long long)empty.held_bytes);
	tmo_destroy(&e);
}

/* ---- fork when the engine cannot be quiesced ------------------------------------------ */

/* Fork; the child checks that the inherited engine refuses a call and that
 * destroy returns (it must not wait for a lock the parked or busy thread
 * held, nor for a callback that never returns there).  1: the child exited
 * 0 in time. */
static int fork_child_destroys(struct tmo *e, int64_t *fork_took)
{
	fflush(NULL);
	int64_t t0 = tmo_now_ns();
	pid_t pid = fork();
	if (pid == 0) {
		struct tmo_stats st;
		int ok = tmo_stats(e, &st) == TMO_EFORKED;
		ok &= tmo_destroy(&e) == 0 && e == NULL;
		_exit(ok ? 0 : 1);
	}
	*fork_took = tmo_now_ns() - t0;
	if (pid < 0)
		return 0;
	int status = 0;
	if (!et_wait_child(pid, 2 * LIVENESS, &status)) {
		fprintf(stderr, "  fork: the child's destroy hung (killed)\n");
		return 0;
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static struct et_gate hold;
/* The parent's engine after such a fork: a new timer fires, destroy is clean. */
static void parent_still_works(struct tmo *e)
{
	static struct tmo_timer t;
	static atomic_int fired;
	tmo_timer_init(&t);
	atomic_store(&fired, 0);
	CHECK_EQ(tmo_arm(e, &t, TMO_NSEC_PER_MSEC, et_count_cb, &fired), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&fired) >= 1, LIVENESS));
	CHECK_EQ(et_cancel_settled(e, &t), TMO_CANCEL_FIRED);
}

static void test_fork_not_quiesced(void)
{
	int64_t took;
	/* Parked: the engine thread holds the base lock at the fork. */
	struct tmo *e = make();
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	CHECK_EQ(fork_child_destroys(e, &took), 1);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	parent_still_works(e);
	tmo_destroy(&e);

	/* A callback that outlasts the fork handler's wait. */
	e = make();
	static struct tmo_timer h;
	atomic_store(&hold.in, 0);
	atomic_store(&hold.open, 0);
	CHECK_EQ(tmo_arm(e, &h, 0, et_gate_cb, &hold), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&hold.in), LIVENESS));
	CHECK_EQ(fork_child_destroys(e, &took), 1);
	atomic_store(&hold.open, 1);
	parent_still_works(e);
	CHECK_EQ(tmo_cancel(e, &h), TMO_CANCEL_FIRED);
	printf("  fork while a callback ran past the quiesce bound: fork took %.0f ms; the "
	       "child's destroy left the base and returned\n", (double)took / 1e6);
	tmo_destroy(&e);
}

int main(void)
{
	int64_t base = tmo_testing_live_allocs();
	RUN(test_arm_during_slow_callback_not_early);
	RUN(test_short_timeouts_not_early);
	RUN(test_park_blocks_arms);
	RUN(test_create_destroy);
	RUN(test_held_bytes);
	RUN(test_fork_not_quiesced);
	return et_main_end(base);
}
