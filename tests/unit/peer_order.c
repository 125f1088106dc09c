/*
 * The peer core's order when its loop thread falls behind (guarantee 4;
 * src/peer/records.c, tmo__peer_run_due and due_may_run; peer.h, the
 * backend's collect and lag_ns).
 *
 * A backend of this test's own is a library that owns its timers: another
 * thread's arm is queued for the loop thread, which starts it; a turn
 * (iterate, collect) reports every started timer due `lib_lag` before the
 * clock it reads, and nothing else.  The loop thread is held in a function
 * run on it (tmo_testing_run_on_loop) while S, started, falls due and Q,
 * queued, due more than the resolution after S, falls due too: then the
 * loop thread drains Q past its deadline, which joins the due list at
 * once, while S waits for the library's next turn.  The core must run S
 * first (it asks the library for a turn, and with a lagging library clock
 * waits for the turn that reports S), each exactly once, never early.
 * Before the core asked (the loop thread ran what it had drained), Q ran
 * first: the inversion beside CPU hogs on libuv, libuv_loop and libev.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "peer/peer.h"
#include "tmo/testing.h"

#define RES TMO_NSEC_PER_MSEC
#define LIB_MAX 4

/* The library: records started and not yet reported. */
struct lib {
	pthread_cond_t cv; /* with the engine's mutex: wake-ups */
	struct peer_rec *started[LIB_MAX];
	int nstarted;
	int64_t lag; /* a turn reports what was due this long before its clock */
	bool woken;
	int turns;
};
#define LIB(e) ((struct lib *)(e)->lib)

static int64_t lib_lag; /* the next engine's library lag (set before create) */

static int lib_init(struct peer *e)
{
	struct lib *l = calloc(1, sizeof *l);
	if (l == NULL)
		return TMO_ENOMEM;
	if (tmo__cond_init_monotonic(&l->cv) != 0) {
		free(l);
		return TMO_ESYS;
	}
	l->lag = lib_lag;
	e->lib = l;
	e->lag_ns += lib_lag; /* what the library says of its clock */
	return 0;
}
static void lib_fini(struct peer *e)
{
	pthread_cond_destroy(&LIB(e)->cv);
	free(LIB(e));
}
static int lib_start(struct peer *e, struct peer_rec *r, int64_t now)
{
	(void)now;
	struct lib *l = LIB(e);
	if (l->nstarted == LIB_MAX)
		return TMO_EAGAIN;
	l->started[l->nstarted++] = r;
	return 0;
}
static void lib_stop(struct peer *e, struct peer_rec *r)
{
	struct lib *l = LIB(e);
	for (int i = 0; i < l->nstarted; i++)
		if (l->started[i] == r) {
			l->started[i] = l->started[--l->nstarted];
			return;
		}
}
static void lib_wake(struct peer *e)
{
	LIB(e)->woken = true;
	pthread_cond_signal(&LIB(e)->cv);
}
/* One turn: report what is due by the library's clock; returns how many. */
static int lib_turn(struct peer *e)
{
	struct lib *l = LIB(e);
	int64_t clock = tmo_now_ns() - l->lag;
	int n = 0;
	l->turns++;
	for (int i = 0; i < l->nstarted;) {
		struct peer_rec *r = l->started[i];
		if (r->deadline <= clock) {
			l->started[i] = l->started[--l->nstarted];
			tmo__peer_fire(e, r);
			n++;
		} else {
			i++;
		}
	}
	return n;
}
static void lib_collect(struct peer *e) { lib_turn(e); }
/* A turn, then (nothing reported, nothing owed) a wait for the next
 * started timer's expiry by the library's clock, or a wake-up. */
static void lib_iterate(struct peer *e)
{
	struct lib *l = LIB(e);
	if (lib_turn(e) > 0 || l->woken || e->stop) {
		l->woken = false;
		return;
	}
	int64_t next = INT64_MAX;
	for (int i = 0; i < l->nstarted; i++)
		if (l->started[i]->deadline < next)
			next = l->started[i]->deadline;
	if (next == INT64_MAX) {
		pthread_cond_wait(&l->cv, &e->m);
	} else {
		next += l->lag;
		struct timespec at = {(time_t)(next / TMO_NSEC_PER_SEC), (long)(next % TMO_NSEC_PER_SEC)};
		pthread_cond_timedwait(&l->cv, &e->m, &at);
	}
	l->woken = false;
	lib_turn(e);
}

static const struct peer_backend lib_be = {
	.name = "order",
	.init = lib_init,
	.fini = lib_fini,
	.start = lib_start,
	.stop = lib_stop,
	.wake = lib_wake,
	.iterate = lib_iterate,
	.collect = lib_collect,
	.lag_ns = 0,
	.fini_forked = lib_fini,
};
static int lib_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg;
	return tmo__peer_create(&lib_be, out);
}
static const struct tmo_testing_ops lib_testing = {.run_on_loop = tmo__peer_run_on_loop};
static const struct tmo_engine_ops lib_ops = {
	.name = "order",
	.summary = "test backend",
	.caps = TMO_CAP_RUN_ON_LOOP,
	.resolution_ns = RES,
	PEER_ENGINE_OPS(lib_create),
	.testing = &lib_testing,
};

/* ---- the test's timers and the held loop thread ------------------------- */

struct mt {
	struct tmo_timer t;
	int ran;    /* under mu: its place in the order callbacks ran (0: not yet) */
	int64_t at; /* under mu: when it ran */
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int seq;            /* under mu */
static bool held, release; /* under mu: the loop thread is in hold(); may leave */

static void mt_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	struct mt *m = tmo_container_of(t, struct mt, t);
	pthread_mutex_lock(&mu);
	m->at = tmo_now_ns();
	m->ran = ++seq;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* On the loop thread: stay until the test releases it. */
static void hold(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	held = true;
	pthread_cond_broadcast(&cv);
	while (!release)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}
static void *holder(void *arg)
{
	CHECK_EQ(tmo_testing_run_on_loop(arg, hold, NULL), 0);
	return NULL;
}

static void sleep_until(int64_t t)
{
	struct timespec at = {(time_t)(t / TMO_NSEC_PER_SEC), (long)(t % TMO_NSEC_PER_SEC)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) != 0) {
	}
}

/* Until the loop thread took every queued arm (started it, or ran it). */
static void wait_drained(struct tmo *e)
{
	struct peer *p = (struct peer *)(void *)e;
	for (;;) {
		peer_lock(p);
		bool done = tmo_list_empty(&p->queue);
		peer_unlock(p);
		if (done)
			return;
		sched_yield(); /* state polled: the loop thread drains within a turn */
	}
}

/* S started and due in `ahead`, the loop thread held, Q queued, due `gap`
 * after S; both past their deadlines when the loop thread goes on.
 * Returns false when S ran before the loop thread was held (this thread
 * was not scheduled for `ahead`): no case, ask again further ahead. */
static bool try_run(int64_t lag, int64_t gap, int64_t ahead)
{
	lib_lag = lag;
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create_ops(&lib_ops, NULL, &e), 0);
	if (e == NULL)
		return true;
	struct mt s = {.t = TMO_TIMER_INIT}, q = {.t = TMO_TIMER_INIT};
	pthread_mutex_lock(&mu);
	seq = 0;
	held = release = false;
	pthread_mutex_unlock(&mu);

	int64_t t0 = tmo_now_ns(), ds = t0 + ahead;
	CHECK_EQ(tmo_arm(e, &s.t, ahead, mt_cb, NULL), 0);
	wait_drained(e);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, holder, e), 0);
	pthread_mutex_lock(&mu);
	while (!held)
		pthread_cond_wait(&cv, &mu);
	bool early = s.ran != 0 || tmo_now_ns() >= ds;
	pthread_mutex_unlock(&mu);
	int64_t dq = 0;
	if (!early) {
		/* S started, not reported: the loop thread ran its due list
		 * before the held function, and S was not due yet */
		int64_t tq = tmo_now_ns();
		dq = ds + gap;
		CHECK_EQ(tmo_arm(e, &q.t, dq - tq, mt_cb, NULL), 0);
		sleep_until(dq); /* with a lagging library clock, S is not reported yet */
	}
	pthread_mutex_lock(&mu);
	release = true;
	pthread_cond_broadcast(&cv);
	while (s.ran == 0 || (!early && q.ran == 0))
		pthread_cond_wait(&cv, &mu);
	if (!early) {
		CHECK_EQ(s.ran, 1); /* S, due `gap` earlier, first */
		CHECK_EQ(q.ran, 2);
		CHECK(q.at >= dq); /* never early */
	}
	CHECK(s.at >= ds);
	pthread_mutex_unlock(&mu);
	pthread_join(th, NULL);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.fired, early ? 1 : 2);
	CHECK_EQ(st.pending, 0);
	tmo_destroy(&e);
	return !early;
}

static void run(int64_t lag, int64_t gap)
{
	int64_t ahead = 20 * RES;
	while (!try_run(lag, gap, ahead))
		ahead *= 2; /* a loaded machine: further ahead, until it fits */
}

/* A library whose turn reports everything due by our clock: one turn
 * before Q runs reports S. */
static void started_before_queued_past_its_deadline(void) { run(0, 4 * RES); }
/* Q due 1.5 resolutions after S: order is owed (more than the resolution). */
static void just_beyond_the_resolution(void) { run(0, 3 * RES / 2); }
/* A library clock 3 resolutions behind ours, which it declares: when the
 * loop thread goes on, S is not reported yet; the core holds Q until the
 * turn that reports S. */
static void library_clock_behind(void) { run(3 * RES, 3 * RES / 2); }

int main(void)
{
	RUN(started_before_queued_past_its_deadline);
	RUN(just_beyond_the_resolution);
	RUN(library_clock_behind);
	return TEST_EXIT();
}
