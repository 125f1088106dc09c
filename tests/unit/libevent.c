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
 *    array after the cancels;
 *  - fork while the engine cannot be quiesced (parked: its thread holds the
 *    base lock; or a callback that outlasts the fork handler's bound): the
 *    child's destroy leaves libevent's base alone and returns, and the
 *    parent's engine is unharmed.  (The quiesced case, with every
 *    descriptor accounted for: tests/engine/lifecycle.c.)
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

/* 1 when thread `tid` of this process sleeps in the kernel (state S or D). */
static bool thread_blocked(pid_t tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	return p != NULL && (p[2] == 'S' || p[2] == 'D');
}

/* Seen blocked `looks` times in a row, a millisecond apart (5 s bound). */
static bool wait_blocked(pid_t tid, int looks)
{
	int64_t end = tmo_now_ns() + 5 * TMO_NSEC_PER_SEC;
	int streak = 0;
	while (streak < looks && tmo_now_ns() < end) {
		sleep_ms(1);
		streak = thread_blocked(tid) ? streak + 1 : 0;
	}
	return streak == looks;
}

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
	spin_ns(20 * TMO_NSEC_PER_MSEC);
	atomic_store(&slow_started, 1);
	while (!atomic_load(&slow_armed))
		;
	spin_ns(20 * TMO_NSEC_PER_MSEC);
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
		CHECK_EQ(wait_for(&slow_started, 1, 5000), 1);
		int64_t armed = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &late, 30 * TMO_NSEC_PER_MSEC, late_cb, NULL), 0);
		atomic_store(&slow_armed, 1);
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

static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_int *)arg, 1);
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
	CHECK_EQ(tmo_park(e, 1), 0);
	static struct blocked_arm b;
	memset(&b, 0, sizeof b);
	b.e = e;
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, arm_thread, &b), 0);
	while (atomic_load(&b.tid) == 0)
		sleep_ms(1);
	CHECK(wait_blocked((pid_t)atomic_load(&b.tid), 3)); /* on the base lock */
	CHECK_EQ(atomic_load(&b.done), 0);
	atomic_store(&b.released, 1);
	CHECK_EQ(tmo_park(e, 0), 0);
	pthread_join(th, NULL);
	CHECK_EQ(b.rc, 0);
	CHECK_EQ(b.released_before_return, 1); /* it got through only after the release */
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
		wait_for(&r.runs, 1 + round % 5, 5000); /* the loop is running */
		int rc = tmo_cancel(e, &r.t);
		bad += rc != TMO_CANCEL_PREVENTED && rc != TMO_CANCEL_WAITED;
		bad += atomic_load(&r.in_cb) != 0;
		prevented += rc == TMO_CANCEL_PREVENTED;
		int runs = atomic_load(&r.runs);
		/* A marker armed now, with timeout 0, fires after anything due
		 * before it: once it ran, a callback after cancel would have
		 * shown. */
		static struct tmo_timer marker;
		static atomic_int marker_runs;
		tmo_timer_init(&marker);
		atomic_store(&marker_runs, 0);
		CHECK_EQ(tmo_arm(e, &marker, 0, count_cb, &marker_runs), 0);
		CHECK_EQ(wait_for(&marker_runs, 1, 5000), 1);
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
	int64_t end = tmo_now_ns() + 10 * TMO_NSEC_PER_SEC;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (tmo_now_ns() > end) {
			fprintf(stderr, "  fork: the child's destroy hung (killed)\n");
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return 0;
		}
		sleep_ms(1);
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static atomic_int hold_started, hold_release;
static void hold_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_store(&hold_started, 1);
	while (!atomic_load(&hold_release))
		sleep_ms(1);
}

/* Cancel of a timer whose callback was seen to run: its last store is not
 * its return, so the engine may still be inside it (WAITED, which promises
 * the return); a second cancel then answers for the settled timer. */
static int cancel_settled(struct tmo *e, struct tmo_timer *t)
{
	int rc = tmo_cancel(e, t);
	return rc == TMO_CANCEL_WAITED ? tmo_cancel(e, t) : rc;
}

/* The parent's engine after such a fork: a new timer fires, destroy is clean. */
static void parent_still_works(struct tmo *e)
{
	static struct tmo_timer t;
	static atomic_int fired;
	tmo_timer_init(&t);
	atomic_store(&fired, 0);
	CHECK_EQ(tmo_arm(e, &t, TMO_NSEC_PER_MSEC, count_cb, &fired), 0);
	CHECK_EQ(wait_for(&fired, 1, 5000), 1);
	CHECK_EQ(cancel_settled(e, &t), TMO_CANCEL_FIRED);
}

static void test_fork_not_quiesced(void)
{
	int64_t took;
	/* Parked: the engine thread holds the base lock at the fork. */
	struct tmo *e = make();
	CHECK_EQ(tmo_park(e, 1), 0);
	CHECK_EQ(fork_child_destroys(e, &took), 1);
	CHECK_EQ(tmo_park(e, 0), 0);
	parent_still_works(e);
	tmo_destroy(&e);

	/* A callback that outlasts the fork handler's wait. */
	e = make();
	static struct tmo_timer h;
	atomic_store(&hold_started, 0);
	atomic_store(&hold_release, 0);
	CHECK_EQ(tmo_arm(e, &h, 0, hold_cb, NULL), 0);
	CHECK_EQ(wait_for(&hold_started, 1, 5000), 1);
	CHECK_EQ(fork_child_destroys(e, &took), 1);
	atomic_store(&hold_release, 1);
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
	RUN(test_rearm_vs_cancel);
	RUN(test_held_bytes);
	RUN(test_fork_not_quiesced);
	CHECK_EQ(tmo_testing_live_allocs(), base);
	return TEST_EXIT();
}
