/*
 * thread engine: what the shared contract tests do not reach, about its
 * threads as a resource and its lifecycle (how it runs callbacks:
 * thread_callbacks.c).
 *
 *  - out of threads: a failed thread creation (fault hook) and the
 *    per-process cap both return TMO_EAGAIN and leak nothing; ten thousand
 *    pending timers fit;
 *  - park is TMO_EINVAL (no single timer thread);
 *  - a finished thread is reaped by a later call, and destroy joins all;
 *  - fork in the middle of activity: the child's destroy frees its copy
 *    without waiting, and the parent's engine is untouched.
 */
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "thread_unit.h"

static struct tmo_stats stats_of(struct tmo *e)
{
	struct tmo_stats s;
	CHECK_EQ(tmo_stats(e, &s), 0);
	return s;
}

static int fail_kind(enum tmo_fault_kind kind, void *ctx)
{
	return kind == *(enum tmo_fault_kind *)ctx;
}

/* A thread engine and the library's live allocations around it: `before`
 * its create, `empty` right after it (the engine with no timer: what every
 * cancel and reap must come back to). */
struct counted_engine {
	struct tmo *e;
	int64_t before, empty;
};

static struct counted_engine counted_create(void)
{
	struct counted_engine c = {.before = tmo_testing_live_allocs()};
	CHECK_EQ(tmo_create(ENGINE, NULL, &c.e), 0);
	c.empty = tmo_testing_live_allocs();
	return c;
}

/* Destroy gives back everything create took and every timer's. */
static void counted_destroy(struct counted_engine *c)
{
	tmo_destroy(&c->e);
	CHECK_EQ(tmo_testing_live_allocs(), c->before);
}

static void test_eagain_enomem(void)
{
	static atomic_int ran;
	struct counted_engine c = counted_create();
	struct tmo *e = c.e;
	struct tmo_timer t = TMO_TIMER_INIT;
	enum tmo_fault_kind kind = TMO_FAULT_THREAD;
	tmo_testing_set_fault(fail_kind, &kind);
	CHECK_EQ(tmo_arm(e, &t, 0, et_count_cb, &ran), TMO_EAGAIN);
	kind = TMO_FAULT_ALLOC;
	CHECK_EQ(tmo_arm(e, &t, 0, et_count_cb, &ran), TMO_ENOMEM);
	tmo_testing_set_fault(NULL, NULL);
	CHECK_EQ(tmo_testing_live_allocs(), c.empty);
	struct tmo_stats s = stats_of(e);
	CHECK_EQ(s.threads, 0);
	CHECK_EQ(s.held_nodes, 0);
	CHECK_EQ(s.pending, 0);
	/* The timer is untouched: not armed, and armable. */
	CHECK_EQ(tmo_cancel(e, &t), TMO_ENOTARMED);
	CHECK_EQ(tmo_arm(e, &t, 0, et_count_cb, &ran), 0);
	CHECK(WAIT_UNTIL(atomic_load(&ran) >= 1));
	counted_destroy(&c);
}

/* Sanitizer runtimes need far more memory per thread: there 10k threads
 * do not fit, so the run is scaled down and the cap is not reached. */
#ifdef TMO__UNDER_SANITIZER
#define TEN_K 500 /* the engine's cap is 1000 there */
#else
#define TEN_K 10000
#endif

/* Ten thousand pending timers fit; the 10001st is refused with EAGAIN
 * (the process-wide cap), and cancelling them all gives everything back. */
static void test_ten_thousand(void)
{
	enum { N = TEN_K };
	if (N < 10000)
		printf("sanitizer build: %d pending timers, the 10000-thread cap not reached\n", N);
	static atomic_int ran;
	struct counted_engine c = counted_create();
	struct tmo *e = c.e;
	struct tmo_timer *t = calloc(N + 1, sizeof *t);
	CHECK(t != NULL);
	int armed = 0, rc = 0;
	while (armed < N && (rc = tmo_arm(e, &t[armed], 3600 * TMO_NSEC_PER_SEC, et_count_cb, &ran)) == 0)
		armed++;
	if (rc != 0)
		fprintf(stderr, "arm %d: %s\n", armed, tmo_errname(rc));
	CHECK_EQ(armed, N);
	if (N == 10000)
		CHECK_EQ(tmo_arm(e, &t[N], 3600 * TMO_NSEC_PER_SEC, et_count_cb, &ran), TMO_EAGAIN);
	struct tmo_stats s = stats_of(e);
	CHECK_EQ(s.threads, armed);
	CHECK_EQ(s.pending, armed);
	CHECK_EQ(s.held_nodes, armed);
	int bad = 0;
	for (int i = 0; i < armed; i++)
		bad += tmo_cancel(e, &t[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	s = stats_of(e);
	CHECK_EQ(s.threads, 0);
	CHECK_EQ(s.held_nodes, 0);
	CHECK_EQ(s.held_bytes, 0);
	CHECK_EQ(s.cancelled, armed);
	CHECK_EQ(tmo_testing_live_allocs(), c.empty);
	/* Room again after the cancels (or, scaled down, still room). */
	CHECK_EQ(tmo_arm(e, &t[N], 3600 * TMO_NSEC_PER_SEC, et_count_cb, &ran), 0);
	CHECK_EQ(tmo_cancel(e, &t[N]), TMO_CANCEL_PREVENTED);
	free(t); /* nothing refers to a timer once its cancel returned */
	counted_destroy(&c);
	CHECK_EQ(atomic_load(&ran), 0);
}

static void test_park_einval(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	CHECK_EQ(tmo_testing_park(e, 1), TMO_EINVAL);
	CHECK_EQ(tmo_testing_park(e, 0), TMO_EINVAL);
	tmo_destroy(&e);
}

/* A fired timer's thread stays until a later call (or destroy) joins it. */
static void test_reap(void)
{
	static atomic_int ran;
	struct counted_engine c = counted_create();
	struct tmo *e = c.e;
	struct tmo_timer a = TMO_TIMER_INIT, b = TMO_TIMER_INIT;
	CHECK_EQ(tmo_arm(e, &a, 0, et_count_cb, &ran), 0);
	CHECK(WAIT_UNTIL(atomic_load(&ran) >= 1));
	struct tmo_stats s = stats_of(e);
	CHECK_EQ(s.pending, 0);
	CHECK_EQ(s.fired, 1);
	CHECK_EQ(s.threads, 1); /* running or finished, not yet joined */
	CHECK_EQ(s.held_nodes, 1);
	/* Cancel after fire joins it (WAITED: it was still returning; the
	 * second cancel then finds it fired). */
	int rc = tmo_cancel(e, &a);
	CHECK(rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED);
	if (rc == TMO_CANCEL_WAITED)
		CHECK_EQ(tmo_cancel(e, &a), TMO_CANCEL_FIRED);
	s = stats_of(e);
	CHECK_EQ(s.threads, 0);
	CHECK_EQ(s.held_nodes, 0);
	CHECK_EQ(tmo_testing_live_allocs(), c.empty);
	int threads0 = et_thread_count(); /* the engine has none now */
	/* An arm of another timer reaps a finished one too: once a's thread
	 * has left the process (it put its record on the done list first). */
	CHECK_EQ(tmo_arm(e, &a, 0, et_count_cb, &ran), 0);
	CHECK(WAIT_UNTIL(atomic_load(&ran) >= 2));
	CHECK_EQ(et_wait_thread_count(threads0, LIVENESS), threads0);
	s = stats_of(e);
	CHECK_EQ(s.threads, 1); /* finished, not yet joined */
	CHECK_EQ(tmo_arm(e, &b, 3600 * TMO_NSEC_PER_SEC, et_count_cb, &ran), 0);
	s = stats_of(e);
	CHECK_EQ(s.threads, 1); /* b's only */
	CHECK_EQ(tmo_cancel(e, &b), TMO_CANCEL_PREVENTED);
	/* Destroy joins a finished thread nobody reaped. */
	CHECK_EQ(tmo_arm(e, &a, 0, et_count_cb, &ran), 0);
	CHECK(WAIT_UNTIL(atomic_load(&ran) >= 3));
	counted_destroy(&c);
}

/* ---- lifecycle --------------------------------------------------------------- */

/* fork() in the middle of activity (callbacks running, timers due and
 * blocked on their turn), so that the child inherits the sets as the
 * prepare handler leaves them: the child's destroy frees its copy
 * (allocations back to what they were before the engine existed, the
 * threads' records included) without joining or waiting, and a new engine
 * works there; the parent's engine is untouched.  (That the inherited
 * engine refuses every call with TMO_EFORKED: engine/lifecycle_fork, for every
 * engine.) */
static atomic_int fk_fires;
static void fk_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&fk_fires, 1);
}

static int fork_child(struct tmo *e, struct tmo_timer *pending, int64_t live_before_engine)
{
	int bad = 0;
	int64_t t0 = tmo_now_ns();
	bad |= (tmo_cancel(e, pending) != TMO_EFORKED) << 0; /* at once: no hang */
	bad |= (tmo_destroy(&e) != 0) << 4;
	bad |= (e != NULL) << 5;
	bad |= (tmo_testing_live_allocs() != live_before_engine) << 6;
	bad |= (tmo_now_ns() - t0 > 10 * TMO_NSEC_PER_SEC) << 7; /* nothing waited */
#ifndef TMO__UNDER_SANITIZER
	/* A new engine works in the child (the sanitizers refuse new threads
	 * after a multi-threaded fork). */
	struct tmo *n;
	if (tmo_create(ENGINE, NULL, &n) != 0) {
		bad |= 1 << 8;
	} else {
		int before = atomic_load(&fk_fires);
		struct tmo_timer x = TMO_TIMER_INIT;
		bad |= (tmo_arm(n, &x, 0, fk_cb, NULL) != 0) << 9;
		WAIT_UNTIL(atomic_load(&fk_fires) != before);
		bad |= (atomic_load(&fk_fires) == before) << 10;
		tmo_destroy(&n);
	}
#endif
	return bad;
}

static void test_fork(void)
{
	int64_t live_before_engine = tmo_testing_live_allocs();
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	struct tmo_timer pending = TMO_TIMER_INIT;
	CHECK_EQ(tmo_arm(e, &pending, 3600 * TMO_NSEC_PER_SEC, fk_cb, NULL), 0);
	enum { BUSY = 60, ROUNDS = 6 };
	static struct tmo_timer busy[BUSY];
	int failed_children = 0, forks = 0;
	for (int round = 0; round < ROUNDS; round++) {
		/* Timers due now and over the next few ms: some running, some
		 * waiting for their turn, some sleeping, as the fork happens. */
		memset(busy, 0, sizeof busy);
		for (int i = 0; i < BUSY; i++)
			CHECK_EQ(tmo_arm(e, &busy[i], (i % 6) * TMO_NSEC_PER_MSEC, fk_cb, NULL), 0);
		et_sleep_ns(MS * (round % 3)); /* vary where the fork lands; no result depends on it */
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0)
			_exit(fork_child(e, &pending, live_before_engine));
		CHECK(pid > 0);
		if (pid < 0)
			break;
		forks++;
		int status = 0;
		if (!et_wait_child(pid, 3 * LIVENESS, &status)) { /* killed: a failure, not a hang */
			fprintf(stderr, "  fork round %d: the child hung\n", round);
			failed_children++;
		} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "  fork round %d: child %s %d (bits of what failed)\n", round,
			        WIFEXITED(status) ? "exited with" : "killed by signal",
			        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			failed_children++;
		}
		for (int i = 0; i < BUSY; i++)
			CHECK_EQ(tmo_cancel(e, &busy[i]) >= 0, 1);
	}
	printf("  fork: %d children, each refused every call on the inherited engine and freed "
	       "its copy; %d failed\n",
	       forks, failed_children);
	CHECK_EQ(failed_children, 0);
	/* The parent's engine is untouched: its pending timer is still there. */
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 1);
	CHECK_EQ(tmo_cancel(e, &pending), TMO_CANCEL_PREVENTED);
	tmo_destroy(&e);
	CHECK_EQ(tmo_testing_live_allocs(), live_before_engine);
}

int main(void)
{
	RUN(test_park_einval);
	RUN(test_eagain_enomem);
	RUN(test_reap);
	RUN(test_fork);
	RUN(test_ten_thousand);
	return TEST_EXIT();
}
