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
 *  - cancel from inside the callback: SELF, or PREVENTED after a re-arm.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "internal.h" /* TMO__UNDER_SANITIZER */
#include "tmo/testing.h"
#include "tmo/tmo.h"

#define ENGINE "thread"

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_int *)arg, 1);
}

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

static void test_eagain_enomem(void)
{
	struct tmo *e;
	static atomic_int ran;
	int64_t live_before = tmo_testing_live_allocs();
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo_timer t = TMO_TIMER_INIT;
	enum tmo_fault_kind kind = TMO_FAULT_THREAD;
	tmo_testing_set_fault(fail_kind, &kind);
	CHECK_EQ(tmo_arm(e, &t, 0, count_cb, &ran), TMO_EAGAIN);
	kind = TMO_FAULT_ALLOC;
	CHECK_EQ(tmo_arm(e, &t, 0, count_cb, &ran), TMO_ENOMEM);
	tmo_testing_set_fault(NULL, NULL);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
	struct tmo_stats s = stats_of(e);
	CHECK_EQ(s.threads, 0);
	CHECK_EQ(s.held_nodes, 0);
	CHECK_EQ(s.pending, 0);
	/* The timer is untouched: not armed, and armable. */
	CHECK_EQ(tmo_cancel(e, &t), TMO_ENOTARMED);
	CHECK_EQ(tmo_arm(e, &t, 0, count_cb, &ran), 0);
	for (int i = 0; i < 400 && atomic_load(&ran) == 0; i++)
		sleep_ms(5);
	CHECK_EQ(atomic_load(&ran), 1);
	tmo_destroy(&e);
	CHECK_EQ(tmo_testing_live_allocs(), live_before);
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
	struct tmo *e;
	static atomic_int ran;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo_timer *t = calloc(N + 1, sizeof *t);
	CHECK(t != NULL);
	int armed = 0, rc = 0;
	while (armed < N && (rc = tmo_arm(e, &t[armed], 3600 * TMO_NSEC_PER_SEC, count_cb, &ran)) == 0)
		armed++;
	if (rc != 0)
		fprintf(stderr, "arm %d: %s\n", armed, tmo_errname(rc));
	CHECK_EQ(armed, N);
	if (N == 10000)
		CHECK_EQ(tmo_arm(e, &t[N], 3600 * TMO_NSEC_PER_SEC, count_cb, &ran), TMO_EAGAIN);
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
	CHECK_EQ(tmo_testing_live_allocs(), live0);
	/* Room again after the cancels (or, scaled down, still room). */
	CHECK_EQ(tmo_arm(e, &t[N], 3600 * TMO_NSEC_PER_SEC, count_cb, &ran), 0);
	CHECK_EQ(tmo_cancel(e, &t[N]), TMO_CANCEL_PREVENTED);
	free(t); /* nothing refers to a timer once its cancel returned */
	tmo_destroy(&e);
	CHECK_EQ(atomic_load(&ran), 0);
}

static void test_park_einval(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	CHECK_EQ(tmo_park(e, 1), TMO_EINVAL);
	CHECK_EQ(tmo_park(e, 0), TMO_EINVAL);
	tmo_destroy(&e);
}

/* A fired timer's thread stays until a later call (or destroy) joins it. */
static void test_reap(void)
{
	struct tmo *e;
	static atomic_int ran;
	int64_t live_before = tmo_testing_live_allocs();
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo_timer a = TMO_TIMER_INIT, b = TMO_TIMER_INIT;
	CHECK_EQ(tmo_arm(e, &a, 0, count_cb, &ran), 0);
	for (int i = 0; i < 400 && atomic_load(&ran) == 0; i++)
		sleep_ms(5);
	CHECK_EQ(atomic_load(&ran), 1);
	struct tmo_stats s = stats_of(e);
	CHECK_EQ(s.pending, 0);
	CHECK_EQ(s.fired, 1);
	CHECK_EQ(s.threads, 1); /* finished, not yet joined */
	CHECK_EQ(s.held_nodes, 1);
	/* Cancel after fire joins it. */
	CHECK_EQ(tmo_cancel(e, &a), TMO_CANCEL_FIRED);
	s = stats_of(e);
	CHECK_EQ(s.threads, 0);
	CHECK_EQ(s.held_nodes, 0);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
	/* An arm of another timer reaps a finished one too. */
	CHECK_EQ(tmo_arm(e, &a, 0, count_cb, &ran), 0);
	for (int i = 0; i < 400 && atomic_load(&ran) == 1; i++)
		sleep_ms(5);
	sleep_ms(5);
	CHECK_EQ(tmo_arm(e, &b, 3600 * TMO_NSEC_PER_SEC, count_cb, &ran), 0);
	s = stats_of(e);
	CHECK_EQ(s.threads, 1); /* b's only */
	CHECK_EQ(tmo_cancel(e, &b), TMO_CANCEL_PREVENTED);
	/* Destroy joins a finished thread nobody reaped. */
	CHECK_EQ(tmo_arm(e, &a, 0, count_cb, &ran), 0);
	for (int i = 0; i < 400 && atomic_load(&ran) == 2; i++)
		sleep_ms(5);
	tmo_destroy(&e);
	CHECK_EQ(tmo_testing_live_allocs(), live_before);
}

/* Two callbacks that each wait for the other to be inside: only an engine
 * that runs callbacks concurrently lets both see two. */
static atomic_int inside, saw_two;
static void meet_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&inside, 1);
	for (int i = 0; i < 1000 && atomic_load(&inside) < 2; i++)
		sleep_ms(1);
	if (atomic_load(&inside) == 2)
		atomic_fetch_add(&saw_two, 1);
	sleep_ms(5);
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
	for (int i = 0; i < 2000 && atomic_load(&saw_two) < 2; i++)
		sleep_ms(1);
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
	sleep_ms(10);
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
		while (atomic_load(&c.runs) < 4)
			sleep_ms(1);
		int64_t t0 = tmo_now_ns();
		int rc = tmo_cancel(c.e, &c.t);
		int64_t took = tmo_now_ns() - t0;
		if (rc != TMO_CANCEL_PREVENTED) {
			fprintf(stderr, "round %d: cancel %s\n", round, tmo_errname(rc));
			bad++;
		}
		if (atomic_load(&c.running) != 0)
			bad++; /* returned while an invocation ran */
		if (took > 2 * TMO_NSEC_PER_SEC)
			bad++; /* starved */
		long runs = atomic_load(&c.runs);
		sleep_ms(20);
		if (atomic_load(&c.runs) != runs)
			bad++; /* an invocation after cancel returned */
		CHECK_EQ(tmo_cancel(c.e, &c.t), TMO_ENOTARMED);
		tmo_destroy(&c.e);
	}
	CHECK_EQ(bad, 0);
}

struct selfc {
	struct tmo *e;
	int rearm;
	int rc;
	atomic_int done;
};

static void self_cb(struct tmo_timer *t, void *arg)
{
	struct selfc *s = arg;
	if (s->rearm)
		CHECK_EQ(tmo_arm(s->e, t, TMO_NSEC_PER_SEC, self_cb, s), 0);
	s->rc = tmo_cancel(s->e, t);
	atomic_store(&s->done, 1);
}

static void test_self_cancel(void)
{
	for (int rearm = 0; rearm <= 1; rearm++) {
		struct selfc s = {NULL, rearm, -100, 0};
		struct tmo_timer t = TMO_TIMER_INIT;
		CHECK_EQ(tmo_create(ENGINE, NULL, &s.e), 0);
		CHECK_EQ(tmo_arm(s.e, &t, 0, self_cb, &s), 0);
		while (!atomic_load(&s.done))
			sleep_ms(1);
		CHECK_EQ(s.rc, rearm ? TMO_CANCEL_PREVENTED : TMO_CANCEL_SELF);
		int rc = tmo_cancel(s.e, &t);
		/* Without a re-arm the callback may still be returning: WAITED. */
		if (rearm)
			CHECK_EQ(rc, TMO_ENOTARMED);
		else
			CHECK(rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED);
		tmo_destroy(&s.e);
	}
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
	for (int i = 0; i < 1000 && atomic_load(&ord_done) < NORD; i++)
		sleep_ms(2);
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

int main(void)
{
	RUN(test_park_einval);
	RUN(test_eagain_enomem);
	RUN(test_reap);
	RUN(test_self_cancel);
	RUN(test_concurrent_callbacks);
	RUN(test_cancel_overlapping_chain);
	RUN(test_order_under_load);
	RUN(test_ten_thousand);
	return TEST_EXIT();
}
