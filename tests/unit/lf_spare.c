/*
 * A thread's free nodes come back to it (src/lf/depot.c, Spares).
 *
 *  - home: the main thread arms 600 held timers on the wheel and cancels
 *    them (its cache keeps LF_CACHE_MAX, the rest spills); a second
 *    thread then arms 600 and gets none of those nodes, and the main
 *    thread's next 600 arms are all its own nodes again.  Through the
 *    depot alone (before the spares) the second thread's first arms took
 *    the main thread's spilled chains: 568 of its 600 nodes were the main
 *    thread's.
 *  - steal: under a node cap of 2,048 the main thread arms 1,500 and
 *    cancels them (2,048 nodes populated, most in its spare); a second
 *    thread's 2,000 arms are all accepted: once the depot is empty and the
 *    pool cannot grow, a refill takes another thread's spare before it
 *    refuses an arm (without it: TMO_EAGAIN after about 1,000).
 * The timer thread is parked throughout those two (tmo_testing_park): it
 * neither steals ring arms nor trims (a trim takes every spare), so which
 * node goes where is decided by the threads alone.
 *  - stolen: the timer thread runs.  This thread arms one timer; once the
 *    timer thread has stolen it (its node filed in the timer thread's
 *    base; a 10 ms ticker keeps the trimmer out) it is cancelled, and its
 *    node must reach this thread's home (depot.c, Homes: the timer thread
 *    frees a stolen arm's node after its owner's cancel); another
 *    thread's next 128 arms must not take it, this thread's next 128 must,
 *    once.  With the timer thread freeing into its own cache (before the
 *    homes) it never reaches the home and this thread's arms never get it
 *    back.
 *  - stolen_pages (reported, not asserted): two threads each hold 1,000
 *    timers (a FIFO: arm one, cancel the one armed 1,000 pairs before)
 *    until the timer thread has stolen 4,000 ring arms; how many 64-node
 *    pages hold both threads' held nodes.  Before the homes 33-56 of
 *    33-56 (every page, or all but one, in seven runs); with them 0 of
 *    34-40 quiet, but 12-21 of 34 beside a CI run (load 5-7 on 2 vCPUs:
 *    a starved timer thread sends nodes home late, and a refill that finds
 *    none at home takes the depot's or grows the pool).  It was asserted
 *    as at most half, which such a run failed (20 of 34): how the
 *    scheduler treats the timer thread decides it, so it is no check.
 * The timeouts (60 s) never come due.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"
#include "lf/debug.h"
#include "lf/lf.h"
#include "lf/pool.h"
#include "lf_nodes.h"
#include "tmo/testing.h"

#define N 600
#define SEC TMO_NSEC_PER_SEC

static unsigned char mine[1u << LF_IDX_BITS];

static void test_home(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	static struct tmo_timer a[N], b[N];
	memset(mine, 0, sizeof mine);
	struct job ja = {e, a, N, 0};
	arm_all(&ja);
	CHECK_EQ(ja.armed, N);
	for (int i = 0; i < N; i++)
		mine[node_of(&a[i])] = 1;
	CHECK_EQ(cancel_all(e, a, N), 0);

	struct job jb = {e, b, N, 0};
	in_thread(&jb);
	CHECK_EQ(jb.armed, N);
	int taken = 0;
	for (int i = 0; i < N; i++)
		taken += mine[node_of(&b[i])];

	arm_all(&ja);
	CHECK_EQ(ja.armed, N);
	int foreign = 0;
	for (int i = 0; i < N; i++)
		foreign += !mine[node_of(&a[i])];
	printf("  the other thread's %d arms took %d of the nodes this thread freed; this "
	       "thread's next %d arms: %d nodes not its own\n",
	       N, taken, N, foreign);
	CHECK_EQ(taken, 0);
	CHECK_EQ(foreign, 0);
	CHECK_EQ(cancel_all(e, a, N), 0);
	CHECK_EQ(cancel_all(e, b, N), 0);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void test_steal(void)
{
	enum { CAP = 2048, A = 1500, B = 2000 };
	tmo_testing_set_node_cap(CAP);
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	tmo_testing_set_node_cap(0);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	static struct tmo_timer a[A], b[B];
	struct job ja = {e, a, A, 0};
	arm_all(&ja);
	CHECK_EQ(ja.armed, A);
	CHECK_EQ(cancel_all(e, a, A), 0);
	struct job jb = {e, b, B, 0};
	in_thread(&jb);
	printf("  cap %d: this thread armed and cancelled %d; the other thread then armed %d "
	       "of %d\n",
	       CAP, A, jb.armed, B);
	CHECK_EQ(jb.armed, B);
	CHECK_EQ(cancel_all(e, b, jb.armed), 0);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

enum { HOLD = 1000, STEALS = 4000 };

struct holder {
	struct tmo *e;
	struct tmo_timer ts[HOLD];
	atomic_int *stop;
	long pairs;
	int bad;
};

/* Arm and cancel in a FIFO of HOLD until *stop; leaves HOLD armed. */
static void *hold_loop(void *arg)
{
	struct holder *h = arg;
	for (long i = 0; i < HOLD || !atomic_load(h->stop); i++) {
		struct tmo_timer *t = &h->ts[i % HOLD];
		if (i >= HOLD)
			h->bad += tmo_cancel(h->e, t) != TMO_CANCEL_PREVENTED;
		int rc;
		while ((rc = tmo_arm(h->e, t, 60 * SEC, no_cb, NULL)) == TMO_EAGAIN)
			sched_yield();
		h->bad += rc != 0;
		h->pairs = i + 1;
	}
	return NULL;
}

/* The core's test view of e, for one of its counters. */
static struct lf_debug debug_of(struct tmo *e)
{
	struct lf_debug d;
	tmo__lf_debug(e, &d);
	return d;
}

struct taker {
	struct tmo *e;
	uint32_t node;
	int bad, got;
};

/* Arm 4 * LF_CACHE_MAX timers (past a refill or two), looking for a node;
 * cancel them all. */
static void *take_nodes(void *arg)
{
	struct taker *x = arg;
	static _Thread_local struct tmo_timer ts[4 * LF_CACHE_MAX];
	for (int i = 0; i < 4 * LF_CACHE_MAX; i++) {
		x->bad += tmo_arm(x->e, &ts[i], 60 * SEC, no_cb, NULL) != 0;
		x->got += node_of(&ts[i]) == x->node;
	}
	x->bad += cancel_all(x->e, ts, 4 * LF_CACHE_MAX);
	return NULL;
}

/* Re-arms itself every 10 ms while `ticking`: the timer thread never
 * sleeps the 50 ms before which it trims (a trim takes every spare and
 * home: a node of a page it may give back goes with the page, or to the
 * depot, where any thread's refill finds it). */
static atomic_int ticking, ticks;
static void tick_cb(struct tmo_timer *t, void *arg)
{
	atomic_fetch_add(&ticks, 1);
	if (atomic_load(&ticking))
		tmo_arm(arg, t, 10 * TMO_NSEC_PER_MSEC, tick_cb, arg);
}

/* t's node was stolen: filed in the timer thread's base. */
static int in_tt(struct tmo *e, struct tmo_timer *t)
{
	struct lf_node *n = lf_node_at(e, node_of(t));
	return lf_st_of(atomic_load(&n->state)) == LF_IN_STRUCT &&
	       (atomic_load(&n->aux) & 3u) == LF_IN_TT;
}

static void test_stolen(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	struct tmo_timer tick = TMO_TIMER_INIT;
	atomic_store(&ticking, 1);
	atomic_store(&ticks, 0);
	CHECK_EQ(tmo_arm(e, &tick, 10 * TMO_NSEC_PER_MSEC, tick_cb, e), 0);
	/* after its first fire, no sleep of the timer thread reaches 50 ms */
	CHECK(ET_WAIT_UNTIL(atomic_load(&ticks) > 0, 30 * SEC));
	/* one ring arm, stolen (filed in the timer thread's base), cancelled:
	 * the timer thread frees its node onto this thread's home */
	struct tmo_timer t = TMO_TIMER_INIT;
	struct lf_debug d0 = debug_of(e);
	CHECK_EQ(tmo_arm(e, &t, 60 * SEC, no_cb, NULL), 0);
	struct taker x = {.e = e, .node = node_of(&t)};
	CHECK(ET_WAIT_UNTIL(in_tt(e, &t), 30 * SEC));
	CHECK_EQ(tmo_cancel(e, &t), TMO_CANCEL_PREVENTED);
	int home = ET_WAIT_UNTIL(debug_of(e).home_count > d0.home_count, 30 * SEC);
	/* another thread's arms do not get it; this thread's next do */
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, take_nodes, &x), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
	int other = x.got;
	x.got = 0;
	take_nodes(&x);
	printf("  a stolen arm cancelled: its node %s this thread's home; another thread's "
	       "%d arms took it %d times, this thread's next %d arms %d times\n",
	       home ? "went to" : "did not reach", 4 * LF_CACHE_MAX, other, 4 * LF_CACHE_MAX,
	       x.got);
	CHECK_EQ(debug_of(e).trim_runs, d0.trim_runs); /* the ticker kept the trimmer out */
	CHECK(home);
	CHECK_EQ(other, 0);
	CHECK_EQ(x.got, 1);
	CHECK_EQ(x.bad, 0);
	atomic_store(&ticking, 0);
	CHECK_EQ(tmo_destroy(&e), 0); /* the ticker's last arm, cancelled */
}

/* Not a check: how many pages two threads' held nodes share depends on
 * how the timer thread is scheduled beside them (a starved one sends
 * nodes home late, and a refill that finds none at home takes the
 * depot's, or grows the pool; past the soft bound another thread's
 * spare): reported, as the throughput scenario's held case reports its
 * pairs/s. */
static void test_stolen_pages(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	static atomic_int stop;
	static struct holder h[2];
	pthread_t th[2];
	atomic_store(&stop, 0);
	uint64_t s0 = debug_of(e).stolen;
	for (int k = 0; k < 2; k++) {
		h[k] = (struct holder){.e = e, .stop = &stop};
		CHECK_EQ(pthread_create(&th[k], NULL, hold_loop, &h[k]), 0);
	}
	int reached = ET_WAIT_UNTIL(debug_of(e).stolen - s0 >= STEALS, 120 * SEC);
	atomic_store(&stop, 1);
	for (int k = 0; k < 2; k++)
		CHECK_EQ(pthread_join(th[k], NULL), 0);
	CHECK(reached);
	/* pages of thread 0's held nodes (bit 1) and thread 1's (bit 2) */
	memset(mine, 0, sizeof mine);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < HOLD; i++)
			mine[node_of(&h[k].ts[i]) / PAGE_NODES] |= (unsigned char)(1u << k);
	int pages = 0, shared = 0;
	for (size_t p = 0; p < sizeof mine; p++) {
		pages += mine[p] != 0;
		shared += mine[p] == 3;
	}
	printf("  two threads held %d timers each through %llu and %llu pairs, %llu ring arms "
	       "stolen: %d of %d pages hold both threads' held nodes (reported)\n",
	       HOLD, (unsigned long long)h[0].pairs, (unsigned long long)h[1].pairs,
	       (unsigned long long)(debug_of(e).stolen - s0), shared, pages);
	CHECK_EQ(h[0].bad + h[1].bad, 0);
	for (int k = 0; k < 2; k++)
		CHECK_EQ(cancel_all(e, h[k].ts, HOLD), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

int main(void)
{
	RUN(test_home);
	RUN(test_steal);
	RUN(test_stolen);
	RUN(test_stolen_pages);
	return TEST_EXIT();
}
