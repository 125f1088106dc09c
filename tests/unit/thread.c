/*
 * thread engine: what the shared contract tests do not reach.
 *
 *  - out of threads: a failed thread creation (fault hook) and the
 *    per-process cap both return TMO_EAGAIN and leak nothing; ten thousand
 *    pending timers fit;
 *  - park is TMO_EINVAL (no single timer thread);
 *  - a finished thread is reaped by a later call, and destroy joins all;
 *  - callbacks of different timers run concurrently (CONCURRENT_CALLBACKS);
 *  - a timer whose callback re-arms itself with a timeout shorter than its
 *    own run has several invocations at once: a cancel from another thread
 *    waits for all of them, is not starved, and prevents the pending arm;
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "engine_test.h"
#include "core/internal.h" /* TMO__UNDER_SANITIZER */
#include "tmo/testing.h"
#include "tmo/tmo.h"

#define ENGINE "thread"

#define MS TMO_NSEC_PER_MSEC
/* A bound for "it happened" (a thread started, a callback ran), not a
 * measurement: far beyond what a loaded machine delays a thread. */
#define LIVENESS (10 * TMO_NSEC_PER_SEC)
/* Waits look every millisecond (the order cases every 2): with a thread per
 * timer, a waiter that looked more often would take the cores from the very
 * threads whose order and lateness the cases check. */
#define WAIT_UNTIL(cond) ET_WAIT_UNTIL_EVERY(cond, LIVENESS, MS)

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

/* Two callbacks that each wait (bounded) until both have arrived: each
 * stays inside until it has seen the other arrive, so both seeing two
 * arrivals proves they ran at once.  An engine that runs one callback at a
 * time makes the first wait out its bound. */
static atomic_int inside, arrived, saw_two;
static void meet_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&inside, 1);
	atomic_fetch_add(&arrived, 1);
	WAIT_UNTIL(atomic_load(&arrived) >= 2);
	if (atomic_load(&arrived) == 2)
		atomic_fetch_add(&saw_two, 1);
	atomic_fetch_sub(&inside, 1);
}

static void test_concurrent_callbacks(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	CHECK(tmo_ops(e)->caps & TMO_CAP_CONCURRENT_CALLBACKS);
	struct tmo_timer a = TMO_TIMER_INIT, b = TMO_TIMER_INIT;
	CHECK_EQ(tmo_arm(e, &a, 0, meet_cb, NULL), 0);
	CHECK_EQ(tmo_arm(e, &b, 0, meet_cb, NULL), 0);
	CHECK(WAIT_UNTIL(atomic_load(&saw_two) >= 2));
	int ra = tmo_cancel(e, &a), rb = tmo_cancel(e, &b);
	CHECK(ra == TMO_CANCEL_FIRED || ra == TMO_CANCEL_WAITED);
	CHECK(rb == TMO_CANCEL_FIRED || rb == TMO_CANCEL_WAITED);
	CHECK_EQ(atomic_load(&inside), 0);
	CHECK_EQ(atomic_load(&saw_two), 2);
	tmo_destroy(&e);
}

/* A callback that re-arms with 1 ms and then runs for 10 ms: several
 * invocations overlap.  A cancel from another thread must wait for all of
 * them, not be starved by new ones, and prevent the pending arm. */
struct chain {
	struct tmo *e;
	struct tmo_timer t;
	atomic_int running;
	atomic_long runs;
};

static void chain_cb(struct tmo_timer *t, void *arg)
{
	struct chain *c = arg;
	atomic_fetch_add(&c->running, 1);
	atomic_fetch_add(&c->runs, 1);
	int rc = tmo_arm(c->e, t, TMO_NSEC_PER_MSEC, chain_cb, c);
	if (rc != 0 && rc != TMO_EARMED)
		fprintf(stderr, "chain re-arm: %s\n", tmo_errname(rc));
	et_sleep_ns(MS * 10);
	atomic_fetch_sub(&c->running, 1);
}

static void test_cancel_overlapping_chain(void)
{
	static struct chain c;
	int bad = 0;
	for (int round = 0; round < 5; round++) {
		memset(&c, 0, sizeof c);
		CHECK_EQ(tmo_create(ENGINE, NULL, &c.e), 0);
		CHECK_EQ(tmo_arm(c.e, &c.t, 0, chain_cb, &c), 0);
		CHECK(WAIT_UNTIL(atomic_load(&c.runs) >= 4));
		int64_t t0 = tmo_now_ns();
		int rc = tmo_cancel(c.e, &c.t);
		int64_t took = tmo_now_ns() - t0;
		if (rc != TMO_CANCEL_PREVENTED) {
			fprintf(stderr, "round %d: cancel %s\n", round, tmo_errname(rc));
			bad++;
		}
		if (atomic_load(&c.running) != 0)
			bad++; /* returned while an invocation ran */
		if (took > LIVENESS)
			bad++; /* starved: a liveness bound, not a speed */
		long runs = atomic_load(&c.runs);
		et_sleep_ns(MS * 20); /* an invocation after cancel returned shows now */
		if (atomic_load(&c.runs) != runs)
			bad++;
		CHECK_EQ(tmo_cancel(c.e, &c.t), TMO_ENOTARMED);
		tmo_destroy(&c.e);
	}
	CHECK_EQ(bad, 0);
}

/* Order under load: two spinning threads keep both cores busy, so the
 * scheduler wakes timer threads late and in any order; callbacks must still
 * follow the deadlines for timers further apart than the resolution.
 * Shown able to fail (ordered pairs out of ~780 per run): the engine
 * without its order heap inverted 3-175 in each of 4 runs; with the heap
 * but waking the next thread at each fire, 7 in 1 of 4; as committed, 0 in
 * 10 release runs and 0 in 6 TSan runs (4 ms apart there). */
#define NORD 40
static atomic_int ord_next, ord_done, spin_stop;
static int ord_seq[NORD];

static void ord_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	ord_seq[(intptr_t)arg] = atomic_fetch_add(&ord_next, 1);
	atomic_fetch_add(&ord_done, 1); /* publishes ord_seq[arg] */
}

static void *spin(void *arg)
{
	(void)arg;
	volatile unsigned long x = 0;
	while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
		x++;
	return NULL;
}

static void test_order_under_load(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	int64_t res = tmo_ops(e)->resolution_ns;
#ifdef TMO__UNDER_SANITIZER
	int64_t gap = 4 * res; /* everything runs several times slower */
#else
	int64_t gap = res + res / 4;
#endif
	static struct tmo_timer t[NORD];
	memset(t, 0, sizeof t);
	atomic_store(&ord_next, 0);
	atomic_store(&ord_done, 0);
	atomic_store(&spin_stop, 0);
	pthread_t sp[2];
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&sp[i], NULL, spin, NULL), 0);
	/* Arm in a scrambled order (i * 7 mod 40 visits every index).  An arm
	 * that comes late (a slow machine) gets a later deadline than planned:
	 * each timer's real deadline lies in [lo, hi], and only pairs whose
	 * deadlines are certainly more than the resolution apart count. */
	static int64_t lo[NORD], hi[NORD];
	int64_t base = tmo_now_ns() + 30 * TMO_NSEC_PER_MSEC;
	for (int k = 0; k < NORD; k++) {
		int i = (k * 7) % NORD;
		int64_t before = tmo_now_ns();
		int64_t timeout = base + i * gap - before;
		if (timeout < 0)
			timeout = 0;
		CHECK_EQ(tmo_arm(e, &t[i], timeout, ord_cb, (void *)(intptr_t)i), 0);
		lo[i] = before + timeout;
		hi[i] = tmo_now_ns() + timeout;
	}
	ET_WAIT_UNTIL_EVERY(atomic_load(&ord_done) >= NORD, LIVENESS, 2 * MS);
	atomic_store(&spin_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(sp[i], NULL);
	CHECK_EQ(atomic_load(&ord_done), NORD);
	int inversions = 0, pairs = 0;
	for (int i = 0; i < NORD; i++)
		for (int j = 0; j < NORD; j++)
			if (lo[j] - hi[i] > res) {
				pairs++;
				inversions += ord_seq[i] > ord_seq[j];
			}
	printf("  order under load: %d timers %lld us apart, %d ordered pairs, %d inversions\n",
	       NORD, (long long)(gap / 1000), pairs, inversions);
	CHECK(pairs >= NORD - 1);
	CHECK_EQ(inversions, 0);
	for (int i = 0; i < NORD; i++)
		CHECK_EQ(tmo_cancel(e, &t[i]) >= 0, 1);
	tmo_destroy(&e);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Thousands of timers 50 us apart, far below the thread cap: every one
 * fires, in order (timers certainly more than the resolution apart), never
 * early.  How late they fire is printed, not asserted (speed is for the
 * benchmarks); completion is bounded well inside the test's timeout.  The
 * deadlines are placed after the arming is expected to end, so the timers
 * are due while the others still wait on their threads. */
struct many {
	atomic_int next;
	atomic_llong fired;
	int *seq;
	int64_t *at, *lo, *hi;
};

static struct many *many_g;
static struct tmo_timer *many_t;

static void many_fire(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct many *m = many_g;
	int i = (int)(t - many_t);
	m->seq[i] = atomic_fetch_add(&m->next, 1);
	m->at[i] = tmo_now_ns();
	atomic_fetch_add(&m->fired, 1); /* publishes at[i], seq[i] */
}

static void many_timers(long n, int64_t gap, int ahead)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	int64_t res = tmo_ops(e)->resolution_ns;
	struct many m = {0};
	many_g = &m;
	many_t = calloc((size_t)n, sizeof *many_t);
	m.seq = calloc((size_t)n, sizeof *m.seq);
	m.at = calloc((size_t)n, sizeof *m.at);
	m.lo = calloc((size_t)n, sizeof *m.lo);
	m.hi = calloc((size_t)n, sizeof *m.hi);
	CHECK(many_t && m.seq && m.at && m.lo && m.hi);
	/* ahead: up to 100 us per arm (thread creation) before the first
	 * deadline, so all are armed before any is due.  Otherwise the first
	 * is due at once and later ones come due while arming goes on (an arm
	 * that falls behind its slot gets timeout 0). */
	/* Two spinning threads keep both cores busy, as a loaded machine
	 * does: timer threads then wait for a core, and any that poll or
	 * wake each other needlessly fall behind. */
	pthread_t sp[2];
	atomic_store(&spin_stop, 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&sp[i], NULL, spin, NULL), 0);
	int64_t t_start = tmo_now_ns();
	int64_t base = t_start + (ahead ? 50 * TMO_NSEC_PER_MSEC + n * 100 * TMO_NSEC_PER_USEC : 0);
	long armed = 0;
	int rc = 0;
	for (; armed < n; armed++) {
		int64_t before = tmo_now_ns();
		int64_t timeout = base + armed * gap - before;
		if (timeout < 0)
			timeout = 0;
		rc = tmo_arm(e, &many_t[armed], timeout, many_fire, NULL);
		if (rc != 0)
			break;
		m.lo[armed] = before + timeout;
		m.hi[armed] = tmo_now_ns() + timeout;
	}
	if (rc == TMO_EAGAIN) {
		atomic_store(&spin_stop, 1);
		for (int i = 0; i < 2; i++)
			pthread_join(sp[i], NULL);
		printf("SKIP many timers: arm %ld of %ld refused with TMO_EAGAIN (the system is out "
		       "of threads)\n",
		       armed, n);
		for (long i = 0; i < armed; i++)
			tmo_cancel(e, &many_t[i]);
		tmo_destroy(&e);
		goto out;
	}
	CHECK_EQ(rc, 0);
	int64_t t_armed = tmo_now_ns();
	/* Generous: a quarter of the ctest timeout past the last deadline (a
	 * run takes about a second; due threads that polled took 15-60 s). */
	int64_t bound = m.hi[armed - 1] + 30 * TMO_NSEC_PER_SEC;
	ET_WAIT_UNTIL_EVERY(atomic_load(&m.fired) >= armed, bound - tmo_now_ns(), 2 * MS);
	long fired = (long)atomic_load(&m.fired);
	atomic_store(&spin_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(sp[i], NULL);
	CHECK_EQ(fired, armed);
	if (fired < armed) {
		fprintf(stderr, "  %ld of %ld timers fired within 30 s of the last deadline\n", fired,
		        armed);
		tmo_destroy(&e); /* cancels the rest */
		goto out;
	}
	long early = 0, inversions = 0;
	int64_t *late = calloc((size_t)armed, sizeof *late);
	int *by_seq = calloc((size_t)armed, sizeof *by_seq);
	CHECK(late && by_seq);
	for (long i = 0; i < armed; i++) {
		early += m.at[i] < m.lo[i];
		late[i] = m.at[i] - m.lo[i];
		by_seq[m.seq[i]] = (int)i;
	}
	/* In firing order: a timer certainly more than the resolution later
	 * than one that fired after it is an inversion. */
	int64_t max_lo = 0;
	for (long k = 0; k < armed; k++) {
		int i = by_seq[k];
		if (k > 0 && max_lo - m.hi[i] > res)
			inversions++;
		if (k == 0 || m.lo[i] > max_lo)
			max_lo = m.lo[i];
	}
	qsort(late, (size_t)armed, sizeof *late, cmp_i64);
	printf("  %ld timers %lld us apart, %s (armed in %.0f ms): late p50 %.0f us, p99 %.0f us, max "
	       "%.0f us; %ld early, %ld inversions\n",
	       armed, (long long)(gap / 1000), ahead ? "armed ahead" : "due while arming",
	       (double)(t_armed - t_start) / 1e6,
	       (double)late[armed / 2] / 1e3, (double)late[armed * 99 / 100] / 1e3,
	       (double)late[armed - 1] / 1e3, early, inversions);
	CHECK_EQ(early, 0);
	CHECK_EQ(inversions, 0);
	for (long i = 0; i < armed; i++)
		CHECK_EQ(tmo_cancel(e, &many_t[i]) >= 0, 1);
	tmo_destroy(&e);
	free(late);
	free(by_seq);
out:
	free(many_t);
	free(m.seq);
	free(m.at);
	free(m.lo);
	free(m.hi);
}

static void test_thousands_50us_apart(void)
{
	/* 9,000: the size that did not finish in 120 s when due threads polled
	 * (the sanitizer cap is 1,000 threads: scaled below it there). */
	many_timers(et_scaled(9000, 200), 50 * TMO_NSEC_PER_USEC, 1);
	many_timers(et_scaled(9000, 200), 50 * TMO_NSEC_PER_USEC, 0);
}

/* A long callback does not hold later timers back: B, due 3 ms after A
 * (beyond the resolution), fires while A's callback still runs, whether A
 * computes or sleeps.  Order only makes B wait until A's thread is seen
 * inside its callback (A's callback waits for B, bounded: B never firing
 * while A runs shows as a failed check, not a hang). */
struct longcb {
	atomic_int a_started, b_ran, b_ran_during_a, a_done;
	int sleeping;
};

static void long_a(struct tmo_timer *t, void *arg)
{
	(void)t;
	struct longcb *l = arg;
	atomic_store(&l->a_started, 1);
	int64_t end = tmo_now_ns() + 5 * TMO_NSEC_PER_SEC;
	while (!atomic_load(&l->b_ran) && tmo_now_ns() < end)
		if (l->sleeping)
			et_sleep_ns(MS);
	if (atomic_load(&l->b_ran))
		atomic_store(&l->b_ran_during_a, 1);
	atomic_store(&l->a_done, 1);
}

static void long_b(struct tmo_timer *t, void *arg)
{
	(void)t;
	struct longcb *l = arg;
	if (atomic_load(&l->a_started)) /* never before A: order */
		atomic_store(&l->b_ran, 1);
}

static void test_long_callback(void)
{
	for (int sleeping = 0; sleeping <= 1; sleeping++) {
		struct tmo *e;
		static struct longcb l;
		memset(&l, 0, sizeof l);
		l.sleeping = sleeping;
		CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
		struct tmo_timer a = TMO_TIMER_INIT, b = TMO_TIMER_INIT;
		CHECK_EQ(tmo_arm(e, &a, 5 * TMO_NSEC_PER_MSEC, long_a, &l), 0);
		CHECK_EQ(tmo_arm(e, &b, 8 * TMO_NSEC_PER_MSEC, long_b, &l), 0);
		ET_WAIT_UNTIL_EVERY(atomic_load(&l.a_done), 2 * LIVENESS, MS);
		int ra = tmo_cancel(e, &a);
		int rb = tmo_cancel(e, &b);
		CHECK(ra == TMO_CANCEL_WAITED || ra == TMO_CANCEL_FIRED);
		CHECK(rb == TMO_CANCEL_WAITED || rb == TMO_CANCEL_FIRED);
		if (!atomic_load(&l.b_ran_during_a))
			fprintf(stderr, "  a %s callback held a later timer back\n",
			        sleeping ? "sleeping" : "computing");
		CHECK_EQ(atomic_load(&l.b_ran_during_a), 1);
		tmo_destroy(&e);
	}
}

/* ---- lifecycle --------------------------------------------------------------- */

/* fork() in the middle of activity (callbacks running, timers due and
 * blocked on their turn), so that the child inherits the sets as the
 * prepare handler leaves them: the child's destroy frees its copy
 * (allocations back to what they were before the engine existed, the
 * threads' records included) without joining or waiting, and a new engine
 * works there; the parent's engine is untouched.  (That the inherited
 * engine refuses every call with TMO_EFORKED: engine/lifecycle, for every
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
	RUN(test_concurrent_callbacks);
	RUN(test_cancel_overlapping_chain);
	RUN(test_order_under_load);
	RUN(test_long_callback);
	RUN(test_fork);
	RUN(test_thousands_50us_apart);
	RUN(test_ten_thousand);
	return TEST_EXIT();
}
