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
 *  - a self-re-arming callback cannot starve a canceller (the drain);
 *  - held_bytes: records while pending, libevent's never-shrinking heap
 *    array after the cancels.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void spin_ns(int64_t ns)
{
	int64_t end = tmo_now_ns() + ns;
	while (tmo_now_ns() < end)
		;
}

static int wait_for(atomic_int *v, int want, int timeout_ms)
{
	int64_t end = tmo_now_ns() + (int64_t)timeout_ms * TMO_NSEC_PER_MSEC;
	while (atomic_load(v) < want && tmo_now_ns() < end)
		sleep_ms(1);
	return atomic_load(v);
}

static struct tmo *make(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("libevent", NULL, &e), 0);
	return e;
}

/* ---- never early for an arm made while a slow callback runs ------------------- */

static atomic_int slow_started;
static atomic_int late_done;
static _Atomic int64_t late_fired;

static void slow_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_store(&slow_started, 1);
	spin_ns(40 * TMO_NSEC_PER_MSEC);
}

static void late_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_store(&late_fired, tmo_now_ns());
	atomic_store(&late_done, 1);
}

/* A 30 ms arm made from this thread 20 ms into a 40 ms callback: dated with
 * the loop's cached time it would fire right after the callback, ~10 ms
 * early. */
static void test_arm_during_slow_callback_not_early(void)
{
	struct tmo *e = make();
	int early = 0;
	int64_t worst = INT64_MAX;
	for (int i = 0; i < 3; i++) {
		static struct tmo_timer slow, late;
		atomic_store(&slow_started, 0);
		atomic_store(&late_done, 0);
		CHECK_EQ(tmo_arm(e, &slow, 0, slow_cb, NULL), 0);
		CHECK_EQ(wait_for(&slow_started, 1, 5000), 1);
		sleep_ms(20);
		int64_t armed = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &late, 30 * TMO_NSEC_PER_MSEC, late_cb, NULL), 0);
		CHECK_EQ(wait_for(&late_done, 1, 5000), 1);
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
	srand(42);
	for (int i = 0; i < SHORT_N; i++) {
		s[i].timeout = (int64_t)(rand() % 3000) * TMO_NSEC_PER_USEC; /* 0..3 ms */
		s[i].armed = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &s[i].t, s[i].timeout, short_cb, NULL), 0);
		if (i % 100 == 99)
			sleep_ms(1); /* spread the deadlines over the clock's ticks */
	}
	CHECK_EQ(wait_for(&short_done, SHORT_N, 10000), SHORT_N);
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
	atomic_int done;
	int rc;
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
	int64_t t0 = tmo_now_ns();
	b->rc = tmo_arm(b->e, &b->t, 10 * TMO_NSEC_PER_SEC, nop_cb, NULL);
	b->took = tmo_now_ns() - t0;
	atomic_store(&b->done, 1);
	return NULL;
}

static void test_park_blocks_arms(void)
{
	struct tmo *e = make();
	CHECK_EQ(tmo_park(e, 1), 0);
	static struct blocked_arm b;
	memset(&b, 0, sizeof b);
	b.e = e;
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, arm_thread, &b), 0);
	sleep_ms(50);
	CHECK_EQ(atomic_load(&b.done), 0); /* blocked on the base lock */
	CHECK_EQ(tmo_park(e, 0), 0);
	pthread_join(th, NULL);
	CHECK_EQ(b.rc, 0);
	CHECK(b.took >= 40 * TMO_NSEC_PER_MSEC);
	CHECK_EQ(tmo_cancel(e, &b.t), TMO_CANCEL_PREVENTED);
	/* Quick succession: a park(1) that finds the thread still parked from
	 * the previous round must not wait for the base lock. */
	int64_t t0 = tmo_now_ns();
	for (int i = 0; i < 100; i++) {
		CHECK_EQ(tmo_park(e, 1), 0);
		CHECK_EQ(tmo_park(e, 0), 0);
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

/* ---- a self-re-arming callback and a canceller ----------------------------------------- */

struct rearm {
	struct tmo_timer t;
	struct tmo *e;
	atomic_int runs, arms, in_cb;
};

static void rearm_cb(struct tmo_timer *t, void *arg)
{
	struct rearm *r = arg;
	atomic_store(&r->in_cb, 1);
	atomic_fetch_add(&r->runs, 1);
	if (tmo_arm(r->e, t, 0, rearm_cb, r) == 0)
		atomic_fetch_add(&r->arms, 1);
	atomic_store(&r->in_cb, 0);
}

static void test_rearm_vs_cancel(void)
{
	struct tmo *e = make();
	int bad = 0, after = 0, prevented = 0;
	for (int round = 0; round < 50; round++) {
		static struct rearm r;
		memset(&r, 0, sizeof r);
		r.e = e;
		CHECK_EQ(tmo_arm(e, &r.t, 0, rearm_cb, &r), 0);
		atomic_fetch_add(&r.arms, 1);
		sleep_ms(2);
		int rc = tmo_cancel(e, &r.t);
		bad += rc != TMO_CANCEL_PREVENTED && rc != TMO_CANCEL_WAITED;
		bad += atomic_load(&r.in_cb) != 0;
		prevented += rc == TMO_CANCEL_PREVENTED;
		int runs = atomic_load(&r.runs);
		sleep_ms(3);
		after += atomic_load(&r.runs) != runs;
		bad += atomic_load(&r.arms) != atomic_load(&r.runs) + (rc == TMO_CANCEL_PREVENTED);
	}
	CHECK_EQ(bad, 0);
	CHECK_EQ(after, 0);
	printf("  50 rounds: %d PREVENTED, %d WAITED, 0 runs after cancel returned\n", prevented,
	       50 - prevented);
	tmo_destroy(&e);
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

int main(void)
{
	int64_t base = tmo_testing_live_allocs();
	RUN(test_arm_during_slow_callback_not_early);
	RUN(test_short_timeouts_not_early);
	RUN(test_park_blocks_arms);
	RUN(test_create_destroy);
	RUN(test_rearm_vs_cancel);
	RUN(test_held_bytes);
	CHECK_EQ(tmo_testing_live_allocs(), base);
	return TEST_EXIT();
}
