/*
 * condvar engine: what the shared contract tests do not reach.
 *
 *  - park: park(1) holds the engine mutex, so an arm from another thread
 *    blocks until park(0), which itself needs no engine lock;
 *  - equal timeouts fire in arm order (one thread, (deadline, seq) heap);
 *  - a due-but-not-yet-run timer is still cancellable (PREVENTED, never
 *    runs) from the callback before it in the same batch;
 *  - two concurrent cancels of a running, re-arming callback: exactly one
 *    PREVENTED, the other WAITED;
 *  - a burst of cancels gives the heap array back (no retention);
 *  - a steady arm/cancel loop does not wake the timer thread (arm signals
 *    only a deadline earlier than the thread's wake-up time).
 *
 * Every case synchronises on state, never on a sleep: a callback's progress
 * is a flag it sets; "this thread is blocked" is its state in
 * /proc/self/task (S: asleep in the kernel); "the earlier callback has
 * returned" is a later timer's callback running, since the engine runs its
 * callbacks one at a time in deadline order.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

#define ENGINE "condvar"

#define LIVENESS (5 * TMO_NSEC_PER_SEC) /* a bound for "it happened", not a measurement */

/* Create the engine and find its timer thread's id (the one new thread). */
static struct tmo *create_with_tid(pid_t *tid)
{
	pid_t before[256];
	int n = et_thread_ids(before, 256);
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	*tid = et_new_thread(before, n);
	CHECK(*tid != 0);
	return e;
}

/* Flush: a timer armed now, with timeout 0, runs only after every callback
 * due before it has returned (one thread, deadline order). */
static void flush(struct tmo *e)
{
	static atomic_int flush_runs;
	static struct tmo_timer ft;
	tmo_timer_init(&ft); /* it may have belonged to an earlier engine */
	int before = atomic_load(&flush_runs);
	CHECK_EQ(tmo_arm(e, &ft, 0, et_count_cb, &flush_runs), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&flush_runs) >= before + 1, LIVENESS));
	CHECK_EQ(et_cancel_settled(e, &ft), TMO_CANCEL_FIRED);
}

/* ---- park ---------------------------------------------------------------- */

struct arm_job {
	struct tmo *e;
	struct tmo_timer *t;
	atomic_int done;
	atomic_int tid;
	int rc;
};

static atomic_int park_fired;
static void *arm_thread(void *arg)
{
	struct arm_job *j = arg;
	atomic_store(&j->tid, (int)gettid());
	j->rc = tmo_arm(j->e, j->t, 0, et_count_cb, &park_fired);
	atomic_store(&j->done, 1);
	return NULL;
}

static void test_park(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	struct tmo_timer t = TMO_TIMER_INIT;
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	CHECK_EQ(tmo_testing_park(e, 1), 0); /* already parked: returns, no deadlock */
	struct arm_job j = {e, &t, 0, 0, -100};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, arm_thread, &j), 0);
	/* The parked thread holds the engine mutex: arm blocks inside. */
	CHECK(ET_WAIT_UNTIL(atomic_load(&j.tid) != 0, LIVENESS));
	CHECK(et_wait_blocked((pid_t)atomic_load(&j.tid), 3, LIVENESS));
	CHECK_EQ(atomic_load(&j.done), 0);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	pthread_join(th, NULL);
	CHECK_EQ(j.rc, 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&park_fired) >= 1, LIVENESS));
	/* A timer that falls due while parked does not fire until released
	 * (armed before parking: arm itself blocks while parked). */
	int64_t due = tmo_now_ns() + 5 * TMO_NSEC_PER_MSEC;
	CHECK_EQ(tmo_arm(e, &t, 5 * TMO_NSEC_PER_MSEC, et_count_cb, &park_fired), 0);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	et_sleep_ns(due + 1 - tmo_now_ns());
	CHECK_EQ(atomic_load(&park_fired), 1);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&park_fired) >= 2, LIVENESS));
	/* Destroy while parked releases and joins the thread. */
	CHECK_EQ(tmo_arm(e, &t, TMO_NSEC_PER_SEC, et_count_cb, &park_fired), 0);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
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
	CHECK(ET_WAIT_UNTIL(atomic_load(&order_done) >= NORDER, LIVENESS));
	int bad = 0;
	for (int i = 0; i < NORDER; i++)
		bad += order_seen[i] != i;
	CHECK_EQ(bad, 0);
	tmo_destroy(&e);
}

/* ---- cancel of a due timer from the callback before it ---------------------- */

struct pair {
	struct tmo *e;
	struct tmo_timer a, b, c;
	atomic_int b_ran;
	atomic_int cancel_b;
	atomic_long c_ran;
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
	atomic_store(&p->cancel_b, tmo_cancel(p->e, &p->b));
}

static void c_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add(&((struct pair *)arg)->c_ran, 1);
}

static void test_cancel_due_in_batch(void)
{
	static struct pair p;
	memset(&p, 0, sizeof p);
	CHECK_EQ(tmo_create(ENGINE, NULL, &p.e), 0);
	/* Park (arm blocks while parked, so arm first) until all three are
	 * due: the thread then finds them in one batch, a, b, c.  c runs only
	 * after a has returned. */
	CHECK_EQ(tmo_arm(p.e, &p.a, 20 * TMO_NSEC_PER_MSEC, a_cb, &p), 0);
	CHECK_EQ(tmo_arm(p.e, &p.b, 20 * TMO_NSEC_PER_MSEC, b_cb, &p), 0);
	CHECK_EQ(tmo_arm(p.e, &p.c, 20 * TMO_NSEC_PER_MSEC, c_cb, &p), 0);
	int64_t all_due = tmo_now_ns() + 20 * TMO_NSEC_PER_MSEC; /* >= every deadline */
	CHECK_EQ(tmo_testing_park(p.e, 1), 0);
	et_sleep_ns(all_due + 1 - tmo_now_ns());
	CHECK_EQ(tmo_testing_park(p.e, 0), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&p.c_ran) >= 1, LIVENESS));
	CHECK_EQ(atomic_load(&p.cancel_b), TMO_CANCEL_PREVENTED);
	CHECK_EQ(atomic_load(&p.b_ran), 0);
	CHECK_EQ(tmo_cancel(p.e, &p.a), TMO_CANCEL_FIRED);
	CHECK_EQ(tmo_cancel(p.e, &p.b), TMO_ENOTARMED);
	flush(p.e); /* c's callback has returned too */
	CHECK_EQ(tmo_cancel(p.e, &p.c), TMO_CANCEL_FIRED);
	tmo_destroy(&p.e);
}

/* ---- two concurrent cancels of a running, re-arming callback ------------------ */

struct slow {
	struct tmo *e;
	struct tmo_timer t;
	atomic_int started, returned;
	atomic_int tid[2];
	int rearm_rc;
};

static void slow_cb(struct tmo_timer *t, void *arg)
{
	struct slow *s = arg;
	atomic_store(&s->started, 1);
	/* Return only once both cancellers wait for this callback. */
	for (int i = 0; i < 2; i++) {
		ET_WAIT_UNTIL(atomic_load(&s->tid[i]) != 0, LIVENESS);
		et_wait_blocked((pid_t)atomic_load(&s->tid[i]), 3, LIVENESS);
	}
	s->rearm_rc = tmo_arm(s->e, t, TMO_NSEC_PER_SEC * 3600, slow_cb, s);
	atomic_store(&s->returned, 1);
}

struct canceller {
	struct slow *s;
	int i;
	int rc;
	int callback_had_returned;
};

static void *cancel_thread(void *arg)
{
	struct canceller *c = arg;
	atomic_store(&c->s->tid[c->i], (int)gettid());
	c->rc = tmo_cancel(c->s->e, &c->s->t);
	c->callback_had_returned = atomic_load(&c->s->returned);
	return NULL;
}

/* Both cancellers arrive while the callback runs (it waits until both are
 * seen blocked), and it re-arms: one of them cancels the re-arm, the other
 * reports that it waited.  A round where one was seen blocked but had not
 * yet reached the wait (it got the engine mutex only after the callback
 * returned: PREVENTED and ENOTARMED) proves nothing and is run again. */
static void test_two_cancels_vs_running(void)
{
	struct tmo *e;
	CHECK_EQ(tmo_create(ENGINE, NULL, &e), 0);
	int good = 0, late = 0, bad = 0;
	for (int round = 0; round < 20 && good < 3; round++) {
		static struct slow s;
		memset(&s, 0, sizeof s);
		s.e = e;
		CHECK_EQ(tmo_arm(e, &s.t, 0, slow_cb, &s), 0);
		CHECK(ET_WAIT_UNTIL(atomic_load(&s.started), LIVENESS));
		struct canceller c[2] = {{&s, 0, -100, 0}, {&s, 1, -100, 0}};
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
		int idle = (c[0].rc == TMO_ENOTARMED) + (c[1].rc == TMO_ENOTARMED);
		if (prevented == 1 && waited == 1)
			good++;
		else if (prevented == 1 && idle == 1)
			late++;
		else
			bad++;
		struct tmo_stats st;
		CHECK_EQ(tmo_stats(e, &st), 0);
		CHECK_EQ(st.pending, 0);
		CHECK_EQ(st.fired, (uint64_t)(round + 1));
		CHECK_EQ(st.cancelled, (uint64_t)(round + 1));
	}
	printf("  two cancels of a running, re-arming callback: %d rounds PREVENTED+WAITED, %d "
	       "with a late canceller, %d wrong\n", good, late, bad);
	CHECK_EQ(bad, 0);
	CHECK_EQ(good, 3);
	tmo_destroy(&e);
}

/* ---- no retention: the heap array shrinks after a burst of cancels ------------- */

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
		CHECK_EQ(tmo_arm(e, &t[i], 120 * TMO_NSEC_PER_SEC, et_count_cb, &ran), 0);
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

/* ---- arm/cancel does not wake the timer thread -------------------------------- */

static long voluntary_switches(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru); /* all threads of the process */
	return ru.ru_nvcsw;
}

static void test_no_wakeups_in_steady_loop(void)
{
	enum { PAIRS = 100000 };
	static atomic_int ran;
	pid_t tid;
	struct tmo *e = create_with_tid(&tid);
	struct tmo_timer t = TMO_TIMER_INIT;
	/* The first arm wakes the idle thread, which then sleeps until this
	 * deadline; later arms are later, so none needs a wake-up. */
	CHECK_EQ(tmo_arm(e, &t, TMO_NSEC_PER_SEC, et_count_cb, &ran), 0);
	CHECK_EQ(tmo_cancel(e, &t), TMO_CANCEL_PREVENTED);
	CHECK(et_wait_blocked(tid, 3, LIVENESS)); /* asleep until that deadline */
	long before = voluntary_switches();
	int bad = 0;
	for (int i = 0; i < PAIRS; i++) {
		bad += tmo_arm(e, &t, TMO_NSEC_PER_SEC, et_count_cb, &ran) != 0;
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
	et_case_watchdog(60); /* a deadlock fails its case by name (cases.h) */
	RUN(test_park);
	RUN(test_fifo_order);
	RUN(test_cancel_due_in_batch);
	RUN(test_two_cancels_vs_running);
	RUN(test_burst_cancel_shrinks);
	RUN(test_no_wakeups_in_steady_loop);
	return TEST_EXIT();
}
