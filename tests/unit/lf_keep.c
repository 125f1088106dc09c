/*
 * A thread's free nodes stay its own (src/lf/depot.c, Spares) when it
 * exits, when the timer thread trims, and when a newcomer needs nodes.
 * Two threads holding timers on one engine whose nodes share lines
 * (128-byte pairs) pay each other's misses: each held pair cost about
 * twice as much at two threads as at one (probes and the throughput
 * scenario's held case on the 2-vCPU AMD EPYC VM; results/ has the
 * record).  Each part names what it found before.
 *
 *  - exit (timer thread parked): this thread has a record; thread A arms
 *    600 held timers, cancels them and exits.  This thread's 600 arms
 *    then take none of A's nodes, and a new thread B, which attaches A's
 *    record, arms 600 on A's nodes alone.  Before, A's exit pushed its
 *    cache and spare to the depot: this thread's arms took 176 of them,
 *    and B 416.
 *  - trim: this thread holds every 8th of 2,048 timers and has cancelled
 *    the rest, and 1,024 more (wholly free pages: the trim takes the
 *    spares); a timer fires and the timer thread, asleep again, has
 *    trimmed.  A new thread's 600 arms then take no node of a page where
 *    this thread holds a timer.  Before, a trim took every spare to the
 *    depot and pushed the nodes of pages in use back there: 555-565 of the
 *    new thread's 600 arms took them (three runs).
 *  - newcomer (timer thread parked): this thread arms 6,000 and cancels
 *    them (its spare holds them, the pool is past 4,096 with nothing
 *    pending); a new thread's 3,000 held arms take none of them.  Before,
 *    the pool's soft bound counted only what was pending: the newcomer's
 *    growth was refused and it took this thread's spare, the rest of it
 *    to the depot for both: 2,088 of its 3,000 nodes were this thread's.
 *  - idle (timer thread parked): this thread arms 600 held timers and
 *    cancels them in order.  The cancel that empties its base sends its
 *    cache to its spare, so what stays in the cache is at most the ring's
 *    arms cancelled after it; and its next arm takes one of its own nodes
 *    again.  Before, the cache kept its 32 nodes: an idle thread's cache
 *    pinned 6 to 10 pages, a free node or three in each, that the trim
 *    could not give back (the retention scenario's wheel settled at
 *    38.6-62.6 KiB, 30.6 after: results/2026-12-06-epyc2-d31142e).
 * The held timeouts (60 s) never come due.
 */
#include <pthread.h>
#include <stdatomic.h>
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

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define N 600

/* mark[x] for arena index x: 1 for a node of thread A's (0: none). */
static unsigned char mark[1u << LF_IDX_BITS];
static int a_bad;

/* Thread A: arm, mark the nodes, cancel them all (then it exits). */
static void *arm_mark_cancel(void *arg)
{
	struct job *j = arg;
	arm_all(j);
	for (int i = 0; i < j->armed; i++) {
		mark[node_of(&j->ts[i])] = 1;
		a_bad += tmo_cancel(j->e, &j->ts[i]) != TMO_CANCEL_PREVENTED;
	}
	return NULL;
}

/* How many of ts[0..n)'s nodes were thread A's. */
static int count_marked(struct tmo_timer *ts, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += mark[node_of(&ts[i])];
	return k;
}

static void test_exit(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	static struct tmo_timer a[N], mine[N], b[N];
	memset(mark, 0, sizeof mark);
	/* this thread's record first: else this thread, the next to attach
	 * one, would get A's */
	CHECK_EQ(tmo_arm(e, &mine[0], 60 * TMO_NSEC_PER_SEC, no_cb, NULL), 0);
	CHECK_EQ(tmo_cancel(e, &mine[0]), TMO_CANCEL_PREVENTED);
	struct job ja = {.e = e, .ts = a, .n = N};
	a_bad = 0;
	in_thread_do(arm_mark_cancel, &ja); /* A: armed, marked, cancelled; exited */
	CHECK_EQ(ja.armed, N);
	CHECK_EQ(a_bad, 0);
	struct job jm = {.e = e, .ts = mine, .n = N};
	arm_all(&jm);
	CHECK_EQ(jm.armed, N);
	struct job jb = {.e = e, .ts = b, .n = N};
	in_thread(&jb); /* B: attaches A's record */
	CHECK_EQ(jb.armed, N);
	int took = count_marked(mine, N), b_own = count_marked(b, N);
	printf("  exit: this thread's %d arms took %d of the exited thread's nodes; the next "
	       "new thread's %d arms, %d\n",
	       N, took, N, b_own);
	CHECK_EQ(took, 0);
	CHECK_EQ(b_own, N);
	CHECK_EQ(cancel_all(e, mine, N), 0);
	CHECK_EQ(cancel_all(e, b, N), 0); /* from this thread: allowed */
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static atomic_int fired;
static void short_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&fired, 1);
}

static void test_trim(void)
{
	enum { HELD = 2048, FREE = 1024, EVERY = 8 };
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	static struct tmo_timer h[HELD + FREE], c[N];
	static unsigned char in_use_page[(1u << LF_IDX_BITS) / PAGE_NODES];
	memset(in_use_page, 0, sizeof in_use_page);
	memset(mark, 0, sizeof mark);
	struct job jh = {.e = e, .ts = h, .n = HELD + FREE};
	arm_all(&jh);
	CHECK_EQ(jh.armed, HELD + FREE);
	int bad = 0, kept = 0;
	for (int i = 0; i < HELD + FREE; i++) {
		if (i < HELD && i % EVERY == 0) {
			in_use_page[node_of(&h[i]) / PAGE_NODES] = 1;
			kept++;
		} else {
			bad += tmo_cancel(e, &h[i]) != TMO_CANCEL_PREVENTED;
		}
	}
	CHECK_EQ(bad, 0);
	/* a fire wakes the timer thread; asleep again, it has trimmed */
	uint64_t before = tmo__lf_trim_runs(e);
	struct tmo_timer s = TMO_TIMER_INIT;
	atomic_store(&fired, 0);
	CHECK_EQ(tmo_arm(e, &s, TMO_NSEC_PER_MSEC, short_cb, NULL), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&fired) == 1, WAIT));
	int trimmed = ET_WAIT_UNTIL(tmo__lf_trim_runs(e) > before, WAIT);
	CHECK(trimmed);
	struct job jc = {.e = e, .ts = c, .n = N};
	in_thread(&jc);
	CHECK_EQ(jc.armed, N);
	int shared = 0;
	for (int i = 0; i < N; i++)
		shared += in_use_page[node_of(&c[i]) / PAGE_NODES];
	printf("  trim: a new thread's %d arms after a trim: %d nodes in pages where this "
	       "thread holds timers\n",
	       N, shared);
	CHECK_EQ(shared, 0);
	CHECK_EQ(cancel_all(e, c, N), 0);
	for (int i = 0; i < HELD; i += EVERY)
		bad += tmo_cancel(e, &h[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void test_newcomer(void)
{
	enum { A = 6000, B = 3000 };
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	static struct tmo_timer a[A], b[B];
	memset(mark, 0, sizeof mark);
	struct job ja = {.e = e, .ts = a, .n = A};
	a_bad = 0;
	arm_mark_cancel(&ja); /* this thread: its spare holds them */
	CHECK_EQ(ja.armed, A);
	CHECK_EQ(a_bad, 0);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	struct job jb = {.e = e, .ts = b, .n = B};
	in_thread(&jb);
	CHECK_EQ(jb.armed, B);
	int took = count_marked(b, B);
	printf("  newcomer: %llu nodes in the pool, nothing pending; a new thread's %d held "
	       "arms took %d of this thread's free nodes\n",
	       (unsigned long long)st.held_nodes, B, took);
	CHECK(st.held_nodes > LF_SOFT_NODES);
	CHECK_EQ(took, 0);
	CHECK_EQ(cancel_all(e, b, B), 0);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void test_idle(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	CHECK_EQ(tmo_testing_park(e, 1), 0); /* nothing stolen from the ring */
	static struct tmo_timer a[N];
	memset(mark, 0, sizeof mark);
	struct job ja = {.e = e, .ts = a, .n = N};
	arm_all(&ja);
	CHECK_EQ(ja.armed, N);
	for (int i = 0; i < N; i++)
		mark[node_of(&a[i])] = 1;
	CHECK_EQ(cancel_all(e, a, N), 0);
	struct lf_debug d;
	tmo__lf_debug(e, &d);
	struct tmo_timer t = TMO_TIMER_INIT;
	CHECK_EQ(tmo_arm(e, &t, 60 * TMO_NSEC_PER_SEC, no_cb, NULL), 0);
	int own = mark[node_of(&t)];
	printf("  idle: %d held arms cancelled in order: %llu free nodes left in this thread's "
	       "cache (at most the ring's %d); the next arm took %s\n",
	       N, (unsigned long long)d.cache_count, LF_RING_SLOTS,
	       own ? "one of those nodes" : "a node not among them");
	CHECK(d.cache_count <= LF_RING_SLOTS);
	CHECK_EQ(own, 1);
	CHECK_EQ(cancel_all(e, &t, 1), 0);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK_EQ(tmo_destroy(&e), 0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	RUN(test_exit);
	RUN(test_trim);
	RUN(test_newcomer);
	RUN(test_idle);
	return TEST_EXIT();
}
