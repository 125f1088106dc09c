/*
 * An arm while a trim holds the depot's nodes (src/lf/trim.c: the timer
 * thread, going to sleep, takes the depot, holds the free nodes of pages
 * it may give back while it counts them by page, gives wholly free pages
 * back and pushes the rest back).  A thread whose cache, spare and home
 * are empty then finds the depot empty; past the pool's soft bound
 * (pool.c, may_grow) growth was refused and the arm answered TMO_EAGAIN,
 * with thousands of free nodes in the pool (a probe on the 2-vCPU AMD EPYC
 * VM: two new threads' first arms after two others had held 10,000 timers
 * each and exited, 8 runs of 40, when the trim held every depot node).  Now it
 * grows by one growth step (GROW_PAGES_MAX pages) while the
 * trim holds them (trim.c, trim_pages; pool.c, may_grow), and a refill refused after the trim ended
 * looks at the depot again.  Unbounded, the growth swelled mpsc's pool to
 * 27,136 nodes under CI's load (sustain: every refill of two busy threads
 * while the trimmer was preempted in its window).
 *
 * Each engine (mpsc, wheel): this thread arms 6,000 timers of 60 s and
 * cancels them, the timer thread parked, and the pending peak is set back
 * (the pool past its soft bound of 4,096 with nothing pending); let go, it trims and is held (hook trim)
 * with the depot's nodes; a new thread's first arm must be accepted, and
 * a second new thread's MANY held arms too (a fixed allowance of 8 pages
 * refused the 513th), the pool grown by less than the trim holds; let go,
 * the trim must give back more than that.  Built again with the refusal
 * planted back (TMO_LF_PLANT_TRIM_REFUSE:
 * hooked/lf_trim_hold-planted-refuse) and with the fixed allowance
 * (TMO_LF_PLANT_TRIM_SMALL: -planted-small), which must report them on
 * both.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "hold.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define SEC TMO_NSEC_PER_SEC
/* MANY held arms raise the soft bound by 2 * MANY: it stays below the
 * pool HELD left, so only the trim's allowance lets the pool grow */
enum { HELD = 6000, MANY = 600 };

static void no_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

struct one_arm {
	struct tmo *e;
	int arm, cancel;
};

static void *arm_one(void *arg)
{
	struct one_arm *a = arg;
	struct tmo_timer t = TMO_TIMER_INIT;
	a->arm = tmo_arm(a->e, &t, 60 * SEC, no_cb, NULL);
	a->cancel = a->arm == 0 ? tmo_cancel(a->e, &t) : TMO_CANCEL_PREVENTED;
	return NULL;
}

static struct tmo_timer ts[HELD];

struct many_arms {
	struct tmo *e;
	int accepted, refused, err;
};

/* Arms up to MANY timers of 60 s, held (the caller cancels them), until
 * one is refused. */
static void *arm_many(void *arg)
{
	struct many_arms *m = arg;
	for (int i = 0; i < MANY; i++) {
		int rc = tmo_arm(m->e, &ts[i], 60 * SEC, no_cb, NULL);
		if (rc != 0) {
			m->refused = 1;
			m->err = rc;
			break;
		}
		m->accepted++;
	}
	return NULL;
}

static void one(const char *eng)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	if (e == NULL)
		return;
	hold_reset();
	/* parked meanwhile: no trim gives the pages back before the held one */
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	int bad = 0;
	for (int i = 0; i < HELD; i++)
		tmo_timer_init(&ts[i]);
	for (int i = 0; i < HELD; i++)
		bad += tmo_arm(e, &ts[i], 60 * SEC, no_cb, NULL) != 0;
	for (int i = 0; i < HELD; i++)
		bad += tmo_cancel(e, &ts[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	/* The soft bound counts the most arms ever pending (pool.c,
	 * may_grow): 6,000 here, under which the pool grows with no
	 * allowance.  Set back, the pool is past its bound, as growers that
	 * pass the bound together leave it (each may add a step beyond it). */
	atomic_store(&e->pool.pending_peak, 0);
	atomic_store(&hold, HOLD_TRIM);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	int in = ET_WAIT_UNTIL(atomic_load(&held), WAIT);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	struct one_arm a = {.e = e};
	struct many_arms m = {.e = e};
	pthread_t th;
	if (in) {
		CHECK_EQ(pthread_create(&th, NULL, arm_one, &a), 0);
		CHECK_EQ(pthread_join(th, NULL), 0);
		for (int i = 0; i < MANY; i++)
			tmo_timer_init(&ts[i]);
		CHECK_EQ(pthread_create(&th, NULL, arm_many, &m), 0);
		CHECK_EQ(pthread_join(th, NULL), 0);
	}
	struct tmo_stats st1, st2;
	CHECK_EQ(tmo_stats(e, &st1), 0);
	atomic_store(&release, 1);
	uint64_t grew = st1.held_nodes - st.held_nodes;
	/* let go, the trim gives back the pages it held: the pool ends
	 * below what it was before the window */
	int back = ET_WAIT_UNTIL(tmo_stats(e, &st2) == 0 && st2.held_nodes < st.held_nodes, WAIT);
	if (!in)
		printf("trim_hold/%s: the timer thread never trimmed\n", eng);
	else if (a.arm != 0)
		printf("trim_hold/%s: the arm was refused (%s) while a trim held the depot, %llu "
		       "nodes in the pool, nothing pending\n",
		       eng, tmo_errname(a.arm), (unsigned long long)st.held_nodes);
	else
		printf("trim_hold/%s: a new thread's arm accepted while a trim held the depot (%llu "
		       "nodes in the pool, nothing pending); another's %d held arms: %d accepted, "
		       "then %s; the pool grew by %llu nodes, then %s %llu\n",
		       eng, (unsigned long long)st.held_nodes, MANY, m.accepted,
		       m.refused ? tmo_errname(m.err) : "none refused", (unsigned long long)grew,
		       back ? "came down to" : "stayed at", (unsigned long long)st2.held_nodes);
	CHECK(in);
	CHECK_EQ(a.arm, 0);
	CHECK_EQ(a.cancel, TMO_CANCEL_PREVENTED);
	CHECK_EQ(st.pending, 0);
	CHECK(st.held_nodes > LF_SOFT_NODES);
	CHECK_EQ(m.accepted, MANY);
	CHECK(grew < st.held_nodes);
	CHECK(back);
	for (int i = 0; i < m.accepted; i++)
		CHECK_EQ(tmo_cancel(e, &ts[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void trim_hold(void)
{
	one("mpsc");
	one("wheel");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	atomic_store(&tmo__lf_hook_trim, hold_trim);
	RUN(trim_hold);
	return TEST_EXIT();
}
