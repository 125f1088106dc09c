/*
 * Focused tests of the lock-free inbox core (src/inbox.c) behind the `mpsc`
 * and `wheel` engines: what the shared contract tests cannot reach.
 *
 *  - generations: a stale copy of a timer whose node was recycled into
 *    another arm neither cancels that arm nor reports it;
 *  - cancel racing fire, many times on two threads: exactly once, and the
 *    cancel result agrees with what the callback saw;
 *  - thread-local caches: two engines, more engines than cache slots, an
 *    engine destroyed while another thread's cache still names it, caches
 *    returned at thread exit; no leak (library allocation count);
 *  - pool growth while the timer thread is parked, and reuse afterwards;
 *  - no retention: cancelled filed timers leave the structure promptly;
 *  - cancel waits for a running callback and cancels its re-arm;
 *  - destroy leaves pending timers idle (armable again);
 *  - each arm is dated by its own call, not by when the timer thread takes
 *    it (order across a parked inbox), never early;
 *  - flow control: two threads arming and cancelling flat out hold a
 *    bounded pool.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "inbox.h"
#include "tmo/testing.h"
#include "tmo/tmo.h"

static const char *const engines[] = {"mpsc", "wheel"};
#define HOUR (3600 * TMO_NSEC_PER_SEC)

static void sleep_ns(int64_t ns)
{
	struct timespec ts = {(time_t)(ns / TMO_NSEC_PER_SEC), (long)(ns % TMO_NSEC_PER_SEC)};
	nanosleep(&ts, NULL);
}

static void nop_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

static struct tmo *make(const char *name)
{
	struct tmo *e = NULL;
	int rc = tmo_create(name, NULL, &e);
	CHECK_EQ(rc, 0);
	if (rc != 0) {
		fprintf(stderr, "cannot create %s: %s\n", name, tmo_errname(rc));
		exit(1);
	}
	return e;
}

/* Wait (up to ~2 s) until the timer thread has filed `want` nodes. */
static int wait_filed(struct tmo *e, uint64_t want)
{
	struct tmo__ib_debug d;
	for (int i = 0; i < 2000; i++) {
		tmo__ib_debug(e, &d);
		if (d.filed == want)
			return 1;
		sleep_ns(TMO_NSEC_PER_MSEC);
	}
	fprintf(stderr, "filed %llu, wanted %llu\n", (unsigned long long)d.filed,
	        (unsigned long long)want);
	return 0;
}

/* ---- generations ------------------------------------------------------------ */

static atomic_int gen_fired;
static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&gen_fired, 1);
}

#define GEN_MAX 20000

/* Arm t[0..] (not cancelling them, so the cache walks through every free
 * magazine) until one gets `node`; returns its index or -1.  The others are
 * cancelled again. */
static int arm_until_node(struct tmo *e, struct tmo_timer *t, void *node, int64_t timeout,
                          tmo_callback *cb)
{
	/* The timer thread hands nodes back a magazine (TMO__IB_MAG) at a
	 * time: recycle a magazine's worth so the node's one is handed out. */
	struct tmo_timer scratch = TMO_TIMER_INIT;
	for (int j = 0; j < 2 * TMO__IB_MAG; j++) {
		CHECK_EQ(tmo_arm(e, &scratch, HOUR, nop_cb, NULL), 0);
		CHECK_EQ(tmo_cancel(e, &scratch), TMO_CANCEL_PREVENTED);
	}
	sleep_ns(5 * TMO_NSEC_PER_MSEC);
	int got = -1, i;
	for (i = 0; i < GEN_MAX && got < 0; i++) {
		CHECK_EQ(tmo_arm(e, &t[i], timeout, cb, NULL), 0);
		if (tmo__ib_timer_node(&t[i], NULL) == node)
			got = i;
		if (i % 256 == 255)
			sleep_ns(TMO_NSEC_PER_MSEC); /* let the timer thread recycle */
	}
	for (int j = 0; j < i; j++)
		if (j != got)
			CHECK_EQ(tmo_cancel(e, &t[j]), TMO_CANCEL_PREVENTED);
	return got;
}

static void generations_on(const char *name)
{
	struct tmo *e = make(name);
	static struct tmo_timer t[GEN_MAX];
	memset(t, 0, sizeof t);
	struct tmo_timer t1 = TMO_TIMER_INIT, stale;
	CHECK_EQ(tmo_arm(e, &t1, HOUR, nop_cb, NULL), 0);
	uint64_t g1, g2;
	void *n1 = tmo__ib_timer_node(&t1, &g1);
	stale = t1; /* a copy taken while armed */
	CHECK_EQ(tmo_cancel(e, &t1), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_cancel(e, &t1), TMO_ENOTARMED);

	/* Arm until an arm gets t1's node back (recycled through a magazine). */
	int k = arm_until_node(e, t, n1, HOUR, nop_cb);
	CHECK(k >= 0);
	if (k >= 0) {
		CHECK(tmo__ib_timer_node(&t[k], &g2) == n1 && g2 > g1);
		/* The stale copy names the same node with an older generation: it
		 * must not cancel that arm. */
		CHECK_EQ(tmo_cancel(e, &stale), TMO_ENOTARMED);
		CHECK_EQ(tmo_cancel(e, &t[k]), TMO_CANCEL_PREVENTED);
	}

	/* Same after a fire: copy taken while pending, the arm fires, its node
	 * is armed again; the stale copy (which says FIRED) must not cancel
	 * that arm. */
	atomic_store(&gen_fired, 0);
	CHECK_EQ(tmo_park(e, 1), 0); /* copy with no fire in flight */
	CHECK_EQ(tmo_arm(e, &t1, 0, count_cb, NULL), 0);
	n1 = tmo__ib_timer_node(&t1, &g1);
	stale = t1;
	CHECK_EQ(tmo_park(e, 0), 0);
	for (int i = 0; i < 2000 && atomic_load(&gen_fired) != 1; i++)
		sleep_ns(TMO_NSEC_PER_MSEC);
	CHECK_EQ(tmo_cancel(e, &t1), TMO_CANCEL_FIRED);
	memset(t, 0, sizeof t);
	k = arm_until_node(e, t, n1, HOUR, nop_cb);
	CHECK(k >= 0);
	if (k >= 0) {
		int rc = tmo_cancel(e, &stale); /* it says PENDING of an arm now gone */
		CHECK(rc == TMO_ENOTARMED || rc == TMO_CANCEL_FIRED);
		CHECK_EQ(tmo_cancel(e, &t[k]), TMO_CANCEL_PREVENTED);
	}
	CHECK_EQ(atomic_load(&gen_fired), 1);
	tmo_destroy(&e);
}

static void test_generations(void)
{
	for (size_t i = 0; i < 2; i++)
		generations_on(engines[i]);
}

/* ---- cancel racing fire ------------------------------------------------------ */

#define RACE_TIMERS 32
#define RACE_ITERS 20000

struct race_timer {
	struct tmo_timer t;
	atomic_int armed;    /* 1 from arm until the callback or a PREVENTED */
	atomic_int returned; /* the callback for the current arm returned */
	atomic_int violations;
};

static void race_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct race_timer *r = tmo_container_of(t, struct race_timer, t);
	int one = 1;
	if (!atomic_compare_exchange_strong(&r->armed, &one, 0))
		atomic_fetch_add(&r->violations, 1); /* ran twice, or after PREVENTED */
	atomic_store(&r->returned, 1);
}

struct race_arg {
	struct tmo *e;
	unsigned seed;
	long arms, prevented, fired, violations;
};

static void *race_thread(void *p)
{
	struct race_arg *a = p;
	static _Thread_local struct race_timer rt[RACE_TIMERS];
	memset(rt, 0, sizeof rt);
	unsigned x = a->seed;
	for (long i = 0; i < RACE_ITERS; i++) {
		struct race_timer *r = &rt[i % RACE_TIMERS];
		x = x * 1103515245u + 12345u;
		int64_t timeout = (int64_t)((x >> 8) % 20000); /* 0 .. 20 us */
		atomic_store(&r->armed, 1);
		atomic_store(&r->returned, 0);
		if (tmo_arm(a->e, &r->t, timeout, race_cb, NULL) != 0) {
			a->violations++;
			continue;
		}
		a->arms++;
		if (i % 16 == 0)
			sleep_ns((int64_t)((x >> 4) % 100000)); /* let some fire */
		else
			for (unsigned spin = (x >> 4) % 2000; spin > 0; spin--)
				__asm__ volatile("" ::: "memory");
		int rc = tmo_cancel(a->e, &r->t);
		if (rc == TMO_CANCEL_PREVENTED) {
			int one = 1;
			if (!atomic_compare_exchange_strong(&r->armed, &one, 0))
				a->violations++; /* prevented, but it ran */
			a->prevented++;
		} else if (rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED) {
			/* the callback ran and has returned */
			if (atomic_load(&r->armed) != 0 || atomic_load(&r->returned) != 1)
				a->violations++;
			a->fired++;
		} else {
			a->violations++;
		}
	}
	for (int i = 0; i < RACE_TIMERS; i++)
		a->violations += atomic_load(&rt[i].violations);
	return NULL;
}

static void race_on(const char *name)
{
	/* a 10 us wheel tick, so the wheel fires within the race window too */
	static const struct tmo_config fine = {.resolution_ns = 10 * TMO_NSEC_PER_USEC};
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(name, &fine, &e), 0);
	if (e == NULL)
		return;
	struct race_arg a[2] = {{e, 1, 0, 0, 0, 0}, {e, 2, 0, 0, 0, 0}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, race_thread, &a[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	struct tmo_stats st;
	tmo_stats(e, &st);
	long arms = a[0].arms + a[1].arms, prevented = a[0].prevented + a[1].prevented,
	     fired = a[0].fired + a[1].fired;
	CHECK_EQ(a[0].violations + a[1].violations, 0);
	CHECK_EQ(arms, 2 * RACE_ITERS);
	CHECK_EQ(prevented + fired, arms);
	CHECK_EQ(st.fired, (uint64_t)fired);
	CHECK_EQ(st.cancelled, (uint64_t)prevented);
	CHECK_EQ(st.pending, 0);
	printf("  %s: %ld arms, %ld prevented, %ld fired\n", name, arms, prevented, fired);
	/* both outcomes must have happened, or the race was not exercised */
	CHECK(prevented > 0 && fired > 0);
	tmo_destroy(&e);
}

static void test_cancel_race(void)
{
	for (size_t i = 0; i < 2; i++)
		race_on(engines[i]);
}

/* ---- thread-local caches ----------------------------------------------------- */

#define MANY 6 /* more engines than TMO__IB_SLOTS */

static void test_caches_many_engines(void)
{
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo *e[MANY];
	for (int i = 0; i < MANY; i++)
		e[i] = make(engines[i % 2]);
	struct tmo_timer t = TMO_TIMER_INIT;
	for (int round = 0; round < 3000; round++) {
		for (int i = 0; i < MANY; i++) {
			tmo_timer_init(&t); /* resolved: free for another engine */
			CHECK_EQ(tmo_arm(e[i], &t, HOUR, nop_cb, NULL), 0);
			CHECK_EQ(tmo_cancel(e[i], &t), TMO_CANCEL_PREVENTED);
		}
		if (round % 100 == 99)
			sleep_ns(2 * TMO_NSEC_PER_MSEC); /* let the timer threads recycle */
	}
	/* The cache cycles through slots, so evicted caches must have gone back
	 * to their engines (else every eviction would leak up to a magazine and
	 * the pools would grow to the soft cap and beyond: 8 slabs when that was
	 * broken on purpose; up to two doublings are a timer thread lagging on
	 * a loaded machine). */
	for (int i = 0; i < MANY; i++) {
		struct tmo__ib_debug d;
		struct tmo_stats st;
		tmo__ib_debug(e[i], &d);
		tmo_stats(e[i], &st);
		CHECK(d.slabs <= 3);
		CHECK_EQ(st.cancelled, 3000);
		CHECK_EQ(st.pending, 0);
	}
	for (int i = 0; i < MANY; i++)
		tmo_destroy(&e[i]);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

/* A thread whose cache names an engine that is destroyed meanwhile. */
struct stale_arg {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int step;
	struct tmo *e;
	int rc_arm, rc_cancel;
};

static void step_wait(struct stale_arg *a, int step)
{
	pthread_mutex_lock(&a->mu);
	while (a->step < step)
		pthread_cond_wait(&a->cv, &a->mu);
	pthread_mutex_unlock(&a->mu);
}

static void step_set(struct stale_arg *a, int step)
{
	pthread_mutex_lock(&a->mu);
	a->step = step;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

static void *stale_thread(void *p)
{
	struct stale_arg *a = p;
	struct tmo_timer t = TMO_TIMER_INIT;
	step_wait(a, 1);
	/* fill a cache for the first engine */
	a->rc_arm = tmo_arm(a->e, &t, HOUR, nop_cb, NULL);
	a->rc_cancel = tmo_cancel(a->e, &t);
	step_set(a, 2);
	step_wait(a, 3); /* the engine was destroyed, another created */
	tmo_timer_init(&t);
	int rc1 = tmo_arm(a->e, &t, HOUR, nop_cb, NULL);
	int rc2 = tmo_cancel(a->e, &t);
	/* keep a cache for the live engine: returned at thread exit */
	int rc3 = tmo_arm(a->e, &t, HOUR, nop_cb, NULL);
	int rc4 = tmo_cancel(a->e, &t);
	if (rc1 != 0 || rc2 != TMO_CANCEL_PREVENTED || rc3 != 0 || rc4 != TMO_CANCEL_PREVENTED)
		a->rc_arm = -100;
	return NULL;
}

static void test_cache_of_destroyed_engine(void)
{
	int64_t live0 = tmo_testing_live_allocs();
	for (size_t k = 0; k < 2; k++) {
		struct stale_arg a = {.step = 0};
		pthread_mutex_init(&a.mu, NULL);
		pthread_cond_init(&a.cv, NULL);
		pthread_t th;
		CHECK_EQ(pthread_create(&th, NULL, stale_thread, &a), 0);
		a.e = make(engines[k]);
		step_set(&a, 1);
		step_wait(&a, 2);
		CHECK_EQ(a.rc_arm, 0);
		CHECK_EQ(a.rc_cancel, TMO_CANCEL_PREVENTED);
		tmo_destroy(&a.e);
		/* likely at the same address: only the id tells them apart */
		a.e = make(engines[1 - k]);
		step_set(&a, 3);
		pthread_join(th, NULL);
		CHECK_EQ(a.rc_arm, 0);
		/* the exited thread's cache went back: this thread can drain the
		 * whole pool without the engine growing */
		struct tmo_timer t[1024];
		memset(t, 0, sizeof t);
		for (int i = 0; i < 1024 - 2 * TMO__IB_MAG; i++)
			CHECK_EQ(tmo_arm(a.e, &t[i], HOUR, nop_cb, NULL), 0);
		struct tmo__ib_debug d;
		tmo__ib_debug(a.e, &d);
		CHECK_EQ(d.slabs, 1);
		tmo_destroy(&a.e);
		pthread_cond_destroy(&a.cv);
		pthread_mutex_destroy(&a.mu);
	}
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

/* ---- pool growth ------------------------------------------------------------- */

#define GROW_N 5000

static void growth_on(const char *name)
{
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo *e = make(name);
	static struct tmo_timer t[GROW_N];
	memset(t, 0, sizeof t);
	struct tmo__ib_debug d;
	struct tmo_stats st;
	CHECK_EQ(tmo_park(e, 1), 0);
	for (int i = 0; i < GROW_N; i++)
		CHECK_EQ(tmo_arm(e, &t[i], HOUR, nop_cb, NULL), 0);
	tmo_stats(e, &st);
	tmo__ib_debug(e, &d);
	CHECK(st.held_nodes >= GROW_N);
	CHECK(d.slabs > 1);
	CHECK_EQ(st.pending, GROW_N);
	CHECK_EQ(d.filed, 0); /* parked: all still in the inbox */
	uint64_t slabs = d.slabs, held = st.held_nodes;
	/* cancel half while queued (parked), half once filed */
	for (int i = 0; i < GROW_N / 2; i++)
		CHECK_EQ(tmo_cancel(e, &t[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_park(e, 0), 0);
	CHECK(wait_filed(e, GROW_N - GROW_N / 2));
	for (int i = GROW_N / 2; i < GROW_N; i++)
		CHECK_EQ(tmo_cancel(e, &t[i]), TMO_CANCEL_PREVENTED);
	CHECK(wait_filed(e, 0));
	tmo_stats(e, &st);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(st.cancelled, GROW_N);
	/* every node came back: arming GROW_N again needs no new slab */
	sleep_ns(20 * TMO_NSEC_PER_MSEC);
	for (int i = 0; i < GROW_N; i++)
		CHECK_EQ(tmo_arm(e, &t[i], HOUR, nop_cb, NULL), 0);
	tmo__ib_debug(e, &d);
	tmo_stats(e, &st);
	CHECK_EQ(d.slabs, slabs);
	CHECK_EQ(st.held_nodes, held);
	tmo_destroy(&e); /* with GROW_N pending */
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

static void test_pool_growth(void)
{
	for (size_t i = 0; i < 2; i++)
		growth_on(engines[i]);
}

/* Out of memory while growing: arm reports TMO_ENOMEM and loses nothing. */
static int fail_all(enum tmo_fault_kind kind, void *ctx)
{
	(void)ctx;
	return kind == TMO_FAULT_ALLOC;
}

static void test_growth_enomem(void)
{
	for (size_t k = 0; k < 2; k++) {
		struct tmo *e = make(engines[k]);
		static struct tmo_timer t[GROW_N];
		memset(t, 0, sizeof t);
		CHECK_EQ(tmo_park(e, 1), 0);
		tmo_testing_set_fault(fail_all, NULL);
		int ok = 0, rc = 0;
		for (int i = 0; i < GROW_N; i++) {
			rc = tmo_arm(e, &t[i], HOUR, nop_cb, NULL);
			if (rc != 0)
				break;
			ok++;
		}
		tmo_testing_set_fault(NULL, NULL);
		CHECK_EQ(rc, TMO_ENOMEM);
		CHECK(ok >= 1024 - 2 * TMO__IB_MAG && ok <= 1024);
		struct tmo_stats st;
		tmo_stats(e, &st);
		CHECK_EQ(st.pending, ok);
		CHECK_EQ(tmo_park(e, 0), 0);
		for (int i = 0; i < ok; i++)
			CHECK_EQ(tmo_cancel(e, &t[i]), TMO_CANCEL_PREVENTED);
		tmo_destroy(&e);
	}
}

/* ---- no retention ------------------------------------------------------------ */

static void test_no_retention(void)
{
	for (size_t k = 0; k < 2; k++) {
		struct tmo *e = make(engines[k]);
		static struct tmo_timer t[1000];
		memset(t, 0, sizeof t);
		for (int i = 0; i < 1000; i++)
			CHECK_EQ(tmo_arm(e, &t[i], HOUR, nop_cb, NULL), 0);
		CHECK(wait_filed(e, 1000));
		int64_t t0 = tmo_now_ns();
		for (int i = 0; i < 1000; i++)
			CHECK_EQ(tmo_cancel(e, &t[i]), TMO_CANCEL_PREVENTED);
		/* filed nodes leave when cancelled, not at their deadline (1 h) */
		CHECK(wait_filed(e, 0));
		printf("  %s: 1000 filed 1 h timers out of the structure %.2f ms after cancel\n",
		       engines[k], (double)(tmo_now_ns() - t0) / 1e6);
		tmo_destroy(&e);
	}
}

/* ---- waits, SELF, re-arm ----------------------------------------------------- */

struct slow {
	struct tmo_timer t;
	struct tmo *e;
	atomic_int entered, returned, rearm, self_rc;
};

static void slow_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct slow *s = tmo_container_of(t, struct slow, t);
	atomic_store(&s->self_rc, tmo_cancel(s->e, t));
	atomic_store(&s->entered, 1);
	sleep_ns(30 * TMO_NSEC_PER_MSEC);
	if (atomic_load(&s->rearm))
		tmo_arm(s->e, t, HOUR, slow_cb, NULL);
	atomic_store(&s->returned, 1);
}

static void test_wait_and_rearm(void)
{
	for (size_t k = 0; k < 2; k++) {
		for (int rearm = 0; rearm < 2; rearm++) {
			struct slow s;
			memset(&s, 0, sizeof s);
			s.e = make(engines[k]);
			atomic_store(&s.rearm, rearm);
			CHECK_EQ(tmo_arm(s.e, &s.t, 0, slow_cb, NULL), 0);
			for (int i = 0; i < 2000000 && !atomic_load(&s.entered); i++)
				sched_yield();
			int rc = tmo_cancel(s.e, &s.t);
			CHECK_EQ(atomic_load(&s.returned), 1); /* cancel waited */
			CHECK_EQ(atomic_load(&s.self_rc), TMO_CANCEL_SELF);
			/* with a re-arm, the cancel prevents the new arm */
			CHECK_EQ(rc, rearm ? TMO_CANCEL_PREVENTED : TMO_CANCEL_WAITED);
			CHECK_EQ(tmo_cancel(s.e, &s.t), rearm ? TMO_ENOTARMED : TMO_CANCEL_FIRED);
			tmo_destroy(&s.e);
		}
	}
}

/* ---- destroy ----------------------------------------------------------------- */

static atomic_int destroy_fired;
static void destroy_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&destroy_fired, 1);
}

static void test_destroy_pending(void)
{
	for (size_t k = 0; k < 2; k++) {
		struct tmo *e = make(engines[k]);
		static struct tmo_timer t[200];
		memset(t, 0, sizeof t);
		atomic_store(&destroy_fired, 0);
		/* 300 ms: long enough to be filed and still pending at destroy on
		 * a loaded machine, short enough to wait past */
		for (int i = 0; i < 100; i++) /* filed */
			CHECK_EQ(tmo_arm(e, &t[i], 300 * TMO_NSEC_PER_MSEC, destroy_cb, NULL), 0);
		CHECK(wait_filed(e, 100));
		CHECK_EQ(tmo_park(e, 1), 0);
		for (int i = 100; i < 200; i++) /* still in the inbox */
			CHECK_EQ(tmo_arm(e, &t[i], 0, destroy_cb, NULL), 0);
		int fired_before = atomic_load(&destroy_fired);
		tmo_destroy(&e);
		sleep_ns(350 * TMO_NSEC_PER_MSEC);
		CHECK_EQ(fired_before, 0);
		CHECK_EQ(atomic_load(&destroy_fired), fired_before); /* none after destroy */
		/* the old arms cannot be cancelled any more; once re-initialised
		 * the timers arm on another engine */
		struct tmo *e2 = make(engines[1 - k]);
		int rc = tmo_cancel(e2, &t[0]);
		/* e2 may reuse e's address: then the timer reads as not armed */
		CHECK(rc == TMO_EWRONGENGINE || rc == TMO_ENOTARMED);
		for (int i = 0; i < 200; i++) {
			tmo_timer_init(&t[i]); /* resolved by destroy */
			CHECK_EQ(tmo_arm(e2, &t[i], HOUR, destroy_cb, NULL), 0);
		}
		for (int i = 0; i < 200; i++)
			CHECK_EQ(tmo_cancel(e2, &t[i]), TMO_CANCEL_PREVENTED);
		tmo_destroy(&e2);
	}
}

/* ---- arms are dated by their call ------------------------------------------ */

struct dated {
	struct tmo_timer t;
	int64_t armed_at, timeout, fired_at;
	atomic_int order;
};
static atomic_int dated_seq;

static void dated_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct dated *d = tmo_container_of(t, struct dated, t);
	d->fired_at = tmo_now_ns();
	atomic_store(&d->order, atomic_fetch_add(&dated_seq, 1) + 1);
}

static void test_arm_dating(void)
{
	for (size_t k = 0; k < 2; k++) {
		struct tmo *e = make(engines[k]);
		struct dated a, b;
		memset(&a, 0, sizeof a);
		memset(&b, 0, sizeof b);
		atomic_store(&dated_seq, 0);
		/* Parked: both arms wait in the inbox and are taken together.
		 * Stamped at that moment, b (shorter timeout) would come first;
		 * dated by their calls, a is due 3 ms before b. */
		CHECK_EQ(tmo_park(e, 1), 0);
		a.timeout = 20 * TMO_NSEC_PER_MSEC;
		a.armed_at = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &a.t, a.timeout, dated_cb, NULL), 0);
		sleep_ns(10 * TMO_NSEC_PER_MSEC);
		b.timeout = 13 * TMO_NSEC_PER_MSEC;
		b.armed_at = tmo_now_ns();
		CHECK_EQ(tmo_arm(e, &b.t, b.timeout, dated_cb, NULL), 0);
		sleep_ns(5 * TMO_NSEC_PER_MSEC);
		CHECK_EQ(tmo_park(e, 0), 0);
		for (int i = 0; i < 2000 && atomic_load(&dated_seq) < 2; i++)
			sleep_ns(TMO_NSEC_PER_MSEC);
		CHECK_EQ(atomic_load(&a.order), 1);
		CHECK_EQ(atomic_load(&b.order), 2);
		/* never early */
		CHECK(a.fired_at >= a.armed_at + a.timeout);
		CHECK(b.fired_at >= b.armed_at + b.timeout);
		printf("  %s: a late %.3f ms, b late %.3f ms\n", engines[k],
		       (double)(a.fired_at - a.armed_at - a.timeout) / 1e6,
		       (double)(b.fired_at - b.armed_at - b.timeout) / 1e6);
		tmo_destroy(&e);
	}
}

/* ---- flow control ------------------------------------------------------------- */

struct flat_arg {
	struct tmo *e;
	atomic_int *stop;
	long pairs, errors;
};

static void *flat_thread(void *p)
{
	struct flat_arg *a = p;
	struct tmo_timer t = TMO_TIMER_INIT;
	while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
		if (tmo_arm(a->e, &t, HOUR, nop_cb, NULL) != 0 ||
		    tmo_cancel(a->e, &t) != TMO_CANCEL_PREVENTED)
			a->errors++;
		a->pairs++;
	}
	return NULL;
}

static void test_flow_control(void)
{
	for (size_t k = 0; k < 2; k++) {
		struct tmo *e = make(engines[k]);
		atomic_int stop = 0;
		struct flat_arg a[2] = {{e, &stop, 0, 0}, {e, &stop, 0, 0}};
		pthread_t th[2];
		for (int i = 0; i < 2; i++)
			CHECK_EQ(pthread_create(&th[i], NULL, flat_thread, &a[i]), 0);
		sleep_ns(300 * TMO_NSEC_PER_MSEC);
		atomic_store(&stop, 1);
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		struct tmo_stats st;
		struct tmo__ib_debug d;
		tmo_stats(e, &st);
		tmo__ib_debug(e, &d);
		CHECK_EQ(a[0].errors + a[1].errors, 0);
		CHECK_EQ(st.pending, 0);
		/* Without flow control the pool follows the timer thread's
		 * backlog (hundreds of thousands of nodes here).  With it: the
		 * soft cap, plus a small slab per stall of a starved thread. */
		CHECK(st.held_nodes <= 2 * TMO__IB_SOFT_NODES);
		printf("  %s: %ld pairs in 0.3 s, %llu nodes held, producers waited %llu times\n",
		       engines[k], a[0].pairs + a[1].pairs, (unsigned long long)st.held_nodes,
		       (unsigned long long)d.waits);
		tmo_destroy(&e);
	}
}

int main(void)
{
	RUN(test_generations);
	RUN(test_cancel_race);
	RUN(test_caches_many_engines);
	RUN(test_cache_of_destroyed_engine);
	RUN(test_pool_growth);
	RUN(test_growth_enomem);
	RUN(test_no_retention);
	RUN(test_wait_and_rearm);
	RUN(test_destroy_pending);
	RUN(test_arm_dating);
	RUN(test_flow_control);
	return TEST_EXIT();
}
