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
 * neither steals ring arms nor trims (a trim takes every spare to the
 * depot), so which node goes where is decided by the threads alone.
 *  - stolen: the timer thread runs.  Two threads each hold 1,000 timers
 *    (a FIFO: arm one, cancel the one armed 1,000 pairs before) until the
 *    timer thread has stolen 4,000 ring arms (its counter, not a time);
 *    then at most half the 64-node pages of held nodes may hold both
 *    threads'.  A stolen arm is filed in the timer thread's base, and its
 *    owner's cancel leaves the node to the timer thread to free (depot.c,
 *    Homes): through its cache and the depot they went to whichever thread
 *    refilled next: before the homes, 33-56 of 33-56 pages held both
 *    (every page, or all but one, in seven runs); with them, 0 of 34-40
 *    quiet, and 0-11 of 37-40 under TSan beside two CPU hogs (a starved
 *    timer thread sends nodes home late, and a refill that finds none at
 *    home grows the pool or, past its soft bound, takes another thread's
 *    spare).
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
#include "tmo/testing.h"

#define N 600
#define SEC TMO_NSEC_PER_SEC

static void no_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	abort(); /* 60 s: never due here */
}

/* The arena index of t's node. */
static uint32_t node_of(struct tmo_timer *t)
{
	return lf_word_idx(atomic_load(lf_timer_word(t)));
}

struct job {
	struct tmo *e;
	struct tmo_timer *ts;
	int n, armed;
};

/* Arm j->n timers until one is refused; cancel none. */
static void *arm_all(void *arg)
{
	struct job *j = arg;
	for (j->armed = 0; j->armed < j->n; j->armed++)
		if (tmo_arm(j->e, &j->ts[j->armed], 60 * SEC, no_cb, NULL) != 0)
			break;
	return NULL;
}

static void in_thread(struct job *j)
{
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, arm_all, j), 0);
	CHECK_EQ(pthread_join(th, NULL), 0);
}

static int cancel_all(struct tmo *e, struct tmo_timer *ts, int n)
{
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += tmo_cancel(e, &ts[i]) != TMO_CANCEL_PREVENTED;
	return bad;
}

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

static uint64_t stolen(struct tmo *e)
{
	struct lf_debug d;
	tmo__lf_debug(e, &d);
	return d.stolen;
}

static void test_stolen(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	static atomic_int stop;
	static struct holder h[2];
	pthread_t th[2];
	atomic_store(&stop, 0);
	uint64_t s0 = stolen(e);
	for (int k = 0; k < 2; k++) {
		h[k] = (struct holder){.e = e, .stop = &stop};
		CHECK_EQ(pthread_create(&th[k], NULL, hold_loop, &h[k]), 0);
	}
	int reached = ET_WAIT_UNTIL(stolen(e) - s0 >= STEALS, 120 * SEC);
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
	       "stolen: %d of %d pages hold both threads' held nodes\n",
	       HOLD, (unsigned long long)h[0].pairs, (unsigned long long)h[1].pairs,
	       (unsigned long long)(stolen(e) - s0), shared, pages);
	CHECK_EQ(h[0].bad + h[1].bad, 0);
	CHECK(shared <= pages / 2);
	for (int k = 0; k < 2; k++)
		CHECK_EQ(cancel_all(e, h[k].ts, HOLD), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

int main(void)
{
	RUN(test_home);
	RUN(test_steal);
	RUN(test_stolen);
	return TEST_EXIT();
}
