/*
 * condvar engine: what the shared contract tests do not reach.
 *
 *  - park: park(1) holds the engine mutex, so an arm from another thread
 *    blocks until park(0), which itself needs no engine lock;
 *  - equal timeouts fire in arm order (one thread, (deadline, seq) heap);
 *  - a due-but-not-yet-run timer is still cancellable (PREVENTED, never
 *    runs) from the callback before it in the same batch;
 *  - a cancel racing a callback that re-arms itself with timeout 0 is not
 *    starved, and no callback runs after it returned;
 *  - two concurrent cancels of a running, re-arming callback: exactly one
 *    PREVENTED, the other WAITED;
 *  - a burst of cancels gives the heap array back (no retention);
 *  - destroy while a callback runs and re-arms: nothing runs afterwards,
 *    every allocation is returned;
 *  - a steady arm/cancel loop does not wake the timer thread (arm signals
 *    only a deadline earlier than the thread's wake-up time).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

#define ENGINE "condvar"

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* ---- park ---------------------------------------------------------------- */

struct arm_job {
	struct tmo *e;
	struct tmo_timer *t;
	atomic_int done;
	int rc;
};

static atomic_int park_fired;
static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void *arm_thread(void *arg)
{
	struct arm_job *j = arg;
	j->rc = tmo_arm(j->e, j->t, 0, count_cb, &park_fired);
	atomic_store(&j->done, 1);
	return NULL;
}

static void test_park(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	struct tmo_timer t = TMO_TIMER_INIT;
	CHECK_EQ(tmo_park(e, 1), 0);
	CHECK_EQ(tmo_park(e, 1), 0); /* already parked: returns, no deadlock */
	struct arm_job j = {e, &t, 0, -100};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, arm_thread, &j), 0);
	sleep_ms(50);
	/* The parked thread holds the engine mutex: arm cannot get through. */
	CHECK_EQ(atomic_load(&j.done), 0);
	CHECK_EQ(tmo_park(e, 0), 0);
	pthread_join(th, NULL);
	CHECK_EQ(j.rc, 0);
	for (int i = 0; i < 200 && atomic_load(&park_fired) == 0; i++)
		sleep_ms(5);
	CHECK_EQ(atomic_load(&park_fired), 1);
	/* A timer that falls due while parked does not fire until released
	 * (armed before parking: arm itself blocks while parked). */
	CHECK_EQ(tmo_arm(e, &t, 5 * TMO_NSEC_PER_MSEC, count_cb, &park_fired), 0);
	CHECK_EQ(tmo_park(e, 1), 0);
	sleep_ms(30);
	CHECK_EQ(atomic_load(&park_fired), 1);
	CHECK_EQ(tmo_park(e, 0), 0);
	for (int i = 0; i < 200 && atomic_load(&park_fired) == 1; i++)
		sleep_ms(5);
	CHECK_EQ(atomic_load(&park_fired), 2);
	/* Destroy while parked releases and joins the thread. */
	CHECK_EQ(tmo_arm(e, &t, TMO_NSEC_PER_SEC, count_cb, &park_fired), 0);
	CHECK_EQ(tmo_park(e, 1), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
	CHECK_EQ(atomic_load(&park_fired), 2);
}

/* ---- FIFO order of equal timeouts ------------------------------------------ */

#define NORDER 2000
static int order_seen[NORDER];
static atomic_int order_n, order_done;

static void order_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	int i = atomic_fetch_add(&order_n, 1);
	if (i < NORDER)
		order_seen[i] = (int)(intptr_t)arg;
	atomic_fetch_add(&order_done, 1); /* publishes order_seen[i] */
}

static void test_fifo_order(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	static struct tmo_timer t[NORDER];
	/* Successive clock reads never decrease, so deadlines are in arm
	 * order, and equal ones (same clock reading) fall back to it. */
	for (int i = 0; i < NORDER; i++)
		CHECK_EQ(tmo_arm(e, &t[i], 20 * TMO_NSEC_PER_MSEC, order_cb, (void *)(intptr_t)i), 0);
	for (int i = 0; i < 400 && atomic_load(&order_done) < NORDER; i++)
		sleep_ms(5);
	CHECK_EQ(atomic_load(&order_done), NORDER);
	int bad = 0;
	for (int i = 0; i < NORDER; i++)
		bad += order_seen[i] != i;
	CHECK_EQ(bad, 0);
	tmo_destroy(&e);
}

/* ---- cancel of a due timer from the callback before it ---------------------- */

struct pair {
	struct tmo *e;
	struct tmo_timer a, b;
	atomic_int b_ran;
	atomic_int cancel_b;
};

static void b_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_store(&((struct pair *)arg)->b_ran, 1);
}

static void a_cb(struct tmo_timer *t, void *arg)
{
	struct pair *p = arg;
	(void)t;
	/* b is due too (same batch), but has not run: it must still be
	 * preventable. */
	sleep_ms(2);
	atomic_store(&p->cancel_b, tmo_cancel(p->e, &p->b));
}

static void test_cancel_due_in_batch(void)
{
	static struct pair p;
	memset(&p, 0, sizeof p);
	CHECK_EQ(tmo_create(ENGINE, NULL, &p.e), 0);
	/* Park (arm blocks while parked, so arm first) until both are due:
	 * the thread then finds them in one batch, a before b. */
	CHECK_EQ(tmo_arm(p.e, &p.a, 20 * TMO_NSEC_PER_MSEC, a_cb, &p), 0);
	CHECK_EQ(tmo_arm(p.e, &p.b, 20 * TMO_NSEC_PER_MSEC, b_cb, &p), 0);
	CHECK_EQ(tmo_park(p.e, 1), 0);
	sleep_ms(30);
	CHECK_EQ(tmo_park(p.e, 0), 0);
	sleep_ms(50);
	CHECK_EQ(atomic_load(&p.cancel_b), TMO_CANCEL_PREVENTED);
	CHECK_EQ(atomic_load(&p.b_ran), 0);
	CHECK_EQ(tmo_cancel(p.e, &p.a), TMO_CANCEL_FIRED);
	CHECK_EQ(tmo_cancel(p.e, &p.b), TMO_ENOTARMED);
	tmo_destroy(&p.e);
}

/* ---- cancel racing a callback that re-arms itself with timeout 0 ------------- */

struct rearm {
	struct tmo *e;
	struct tmo_timer t;
	atomic_long runs;
	atomic_int in_cb;
};

static void rearm_cb(struct tmo_timer *t, void *arg)
{
	struct rearm *r = arg;
	atomic_store(&r->in_cb, 1);
	atomic_fetch_add(&r->runs, 1);
	atomic_store(&r->in_cb, 0);
	int rc = tmo_arm(r->e, t, 0, rearm_cb, r);
	if (rc != 0)
		fprintf(stderr, "re-arm failed: %s\n", tmo_errname(rc));
}

static void test_cancel_vs_rearm_loop(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	static struct rearm r;
	int bad = 0, prevented = 0;
	for (int round = 0; round < 200; round++) {
		memset(&r, 0, sizeof r);
		r.e = e;
		CHECK_EQ(tmo_arm(e, &r.t, 0, rearm_cb, &r), 0);
		while (atomic_load(&r.runs) < 1 + round % 5)
			;
		int64_t t0 = tmo_now_ns();
		int rc = tmo_cancel(e, &r.t);
		int64_t took = tmo_now_ns() - t0;
		/* The callback always re-arms, so the loop is broken only by a
		 * cancel that prevents the pending arm. */
		if (rc != TMO_CANCEL_PREVENTED)
			bad++;
		prevented += rc == TMO_CANCEL_PREVENTED;
		if (took > TMO_NSEC_PER_SEC)
			bad++; /* starved */
		long after = atomic_load(&r.runs);
		if (atomic_load(&r.in_cb))
			bad++; /* cancel returned while the callback ran */
		sleep_ms(1);
		if (atomic_load(&r.runs) != after)
			bad++; /* a callback after cancel returned */
	}
	CHECK_EQ(bad, 0);
	CHECK_EQ(prevented, 200);
	tmo_destroy(&e);
}

/* ---- two concurrent cancels of a running, re-arming callback ------------------ */

struct slow {
	struct tmo *e;
	struct tmo_timer t;
	atomic_int started, returned;
	int rearm_rc;
};

static void slow_cb(struct tmo_timer *t, void *arg)
{
	struct slow *s = arg;
	atomic_store(&s->started, 1);
	sleep_ms(100); /* both cancellers arrive meanwhile */
	s->rearm_rc = tmo_arm(s->e, t, TMO_NSEC_PER_SEC * 3600, slow_cb, s);
	atomic_store(&s->returned, 1);
}

struct canceller {
	struct slow *s;
	int rc;
	int callback_had_returned;
};

static void *cancel_thread(void *arg)
{
	struct canceller *c = arg;
	c->rc = tmo_cancel(c->s->e, &c->s->t);
	c->callback_had_returned = atomic_load(&c->s->returned);
	return NULL;
}

static void test_two_cancels_vs_running(void)
{
	static struct slow s;
	memset(&s, 0, sizeof s);
	CHECK_EQ(tmo_create(ENGINE, NULL, &s.e), 0);
	CHECK_EQ(tmo_arm(s.e, &s.t, 0, slow_cb, &s), 0);
	while (!atomic_load(&s.started))
		;
	struct canceller c[2] = {{&s, -100, 0}, {&s, -100, 0}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, cancel_thread, &c[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(s.rearm_rc, 0);
	CHECK_EQ(c[0].callback_had_returned, 1);
	CHECK_EQ(c[1].callback_had_returned, 1);
	int prevented = (c[0].rc == TMO_CANCEL_PREVENTED) + (c[1].rc == TMO_CANCEL_PREVENTED);
	int waited = (c[0].rc == TMO_CANCEL_WAITED) + (c[1].rc == TMO_CANCEL_WAITED);
	CHECK_EQ(prevented, 1);
	CHECK_EQ(waited, 1);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(s.e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(st.fired, 1);
	CHECK_EQ(st.cancelled, 1);
	tmo_destroy(&s.e);
}

/* ---- self cancel: SELF, or PREVENTED after a re-arm ---------------------------- */

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
		CHECK_EQ(tmo_cancel(s.e, &t), rearm ? TMO_ENOTARMED : TMO_CANCEL_FIRED);
		tmo_destroy(&s.e);
	}
}

/* ---- no retention: the heap array shrinks after a burst of cancels ------------- */

static void never_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_burst_cancel_shrinks(void)
{
	enum { N = 100000 };
	struct tmo *e;
	static atomic_int ran;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	uint64_t floor_bytes = st.held_bytes;
	struct tmo_timer *t = calloc(N, sizeof *t);
	CHECK(t != NULL);
	for (int i = 0; i < N; i++)
		CHECK_EQ(tmo_arm(e, &t[i], 120 * TMO_NSEC_PER_SEC, never_cb, &ran), 0);
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, N);
	CHECK(st.held_bytes >= N * sizeof(void *));
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += tmo_cancel(e, &t[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(st.held_nodes, 0);
	CHECK_EQ(st.held_bytes, floor_bytes);
	CHECK_EQ(st.cancelled, N);
	CHECK_EQ(atomic_load(&ran), 0);
	free(t); /* the engine holds no reference after cancel */
	tmo_destroy(&e);
}

/* ---- destroy while a callback runs and re-arms ---------------------------------- */

struct busy {
	struct tmo *e;
	atomic_int started;
	atomic_int after_destroy;
	atomic_int destroyed;
};

static void busy_cb(struct tmo_timer *t, void *arg)
{
	struct busy *b = arg;
	if (atomic_load(&b->destroyed))
		atomic_store(&b->after_destroy, 1);
	atomic_store(&b->started, 1);
	sleep_ms(20);
	tmo_arm(b->e, t, 0, busy_cb, b); /* into an engine being destroyed */
}

static void test_destroy_while_running(void)
{
	int64_t live0 = tmo_testing_live_allocs();
	static struct busy b;
	static struct tmo_timer t[3];
	memset(&b, 0, sizeof b);
	memset(t, 0, sizeof t);
	CHECK_EQ(tmo_create(ENGINE, NULL, &b.e), 0);
	CHECK_EQ(tmo_arm(b.e, &t[0], 0, busy_cb, &b), 0);
	CHECK_EQ(tmo_arm(b.e, &t[1], 0, busy_cb, &b), 0);
	CHECK_EQ(tmo_arm(b.e, &t[2], TMO_NSEC_PER_SEC, busy_cb, &b), 0);
	while (!atomic_load(&b.started))
		;
	struct tmo *e = b.e;
	tmo_destroy(&e);
	atomic_store(&b.destroyed, 1);
	sleep_ms(60);
	CHECK_EQ(atomic_load(&b.after_destroy), 0);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

/* ---- arm/cancel does not wake the timer thread -------------------------------- */

static void quiet_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_int *)arg, 1);
}

static long voluntary_switches(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru); /* all threads of the process */
	return ru.ru_nvcsw;
}

static void test_no_wakeups_in_steady_loop(void)
{
	enum { PAIRS = 100000 };
	struct tmo *e;
	static atomic_int ran;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	struct tmo_timer t = TMO_TIMER_INIT;
	/* The first arm wakes the idle thread, which then sleeps until this
	 * deadline; later arms are later, so none needs a wake-up. */
	CHECK_EQ(tmo_arm(e, &t, TMO_NSEC_PER_SEC, quiet_cb, &ran), 0);
	CHECK_EQ(tmo_cancel(e, &t), TMO_CANCEL_PREVENTED);
	sleep_ms(20);
	long before = voluntary_switches();
	int bad = 0;
	for (int i = 0; i < PAIRS; i++) {
		bad += tmo_arm(e, &t, TMO_NSEC_PER_SEC, quiet_cb, &ran) != 0;
		bad += tmo_cancel(e, &t) != TMO_CANCEL_PREVENTED;
	}
	long switches = voluntary_switches() - before;
	printf("  %d arm+cancel pairs: %ld voluntary context switches\n", PAIRS, switches);
	CHECK_EQ(bad, 0);
	/* Measured: 1-4 here; the engine that signalled every arm which became
	 * the earliest (always, with one timer) caused 48-2276 per run. */
	CHECK(switches < 30);
	CHECK_EQ(atomic_load(&ran), 0);
	tmo_destroy(&e);
}

int main(void)
{
	RUN(test_park);
	RUN(test_fifo_order);
	RUN(test_cancel_due_in_batch);
	RUN(test_self_cancel);
	RUN(test_cancel_vs_rearm_loop);
	RUN(test_two_cancels_vs_running);
	RUN(test_burst_cancel_shrinks);
	RUN(test_destroy_while_running);
	RUN(test_no_wakeups_in_steady_loop);
	return TEST_EXIT();
}
