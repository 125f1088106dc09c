/*
 * While a trim holds the depot's nodes, before it has given a page back,
 * the pool grows past its soft bound by one growth step at most
 * (src/lf/trim.c, trim_pages; pool.c, may_grow).  The allowance was once
 * the trim's candidate pages: refills took the whole of it while a
 * preempted trimmer held the depot, and mpsc's pool under the sustain
 * scenario reached nearly twice its size before the trim gave its pages
 * back, past the scenario's limit (15,552 nodes in one CI run of twelve).
 * And a candidate is only a page no node of which reads in use: a
 * cancelled arm on its way to the timer thread through mpsc's inbox does
 * not (trim.c, in_use), so pages the trim cannot give back counted too,
 * and what refills grew on them stayed after the trim.
 *
 * mpsc only: its cancelled arms travel through the inbox to its one timer
 * thread; the wheel's owner takes a cancelled arm out of its own wheel and
 * frees the node at once, into the record whose spare and home the trim
 * takes (lf_trim_hold holds a trim on both engines).
 *
 * The timer thread parked, this thread arms FIRST timers of 60 s and
 * cancels them (the pool past its soft bound of 4,096 once the pending
 * peak is set back); let go, the timer thread frees them, goes to sleep
 * and trims: held as it starts (hook trim_start), this thread arms and
 * cancels SECOND more (their nodes, taken from the depot, sit cancelled in
 * the inbox: the pages stay candidates); held again with the depot's
 * nodes (hook trim), a new thread arms up to MANY held timers (below the
 * soft bound they raise) until one is refused: the pool must have grown by
 * GROW_PAGES_MAX pages at most; held at the next round (hook round), the
 * trim is over.  Built again with the allowance at the candidate pages
 * (TMO_LF_PLANT_TRIM_CAND: hooked/lf_trim_inbox-planted-cand), which must
 * report the growth.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "lf/debug.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "lf/pool.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
#define SEC TMO_NSEC_PER_SEC
/* SECOND leaves ten pages' worth of FIRST's nodes in the depot; MANY
 * arms pending raise the soft bound to 4,096 + 2 * MANY, below the pool
 * FIRST left, so only the trim's allowance lets the pool grow */
enum { FIRST = 12000, SECOND = FIRST - 10 * 64, MANY = 3000 };

/* Each hook's stop: armed once (stop_at), then the timer thread waits
 * there (stopped) until let go (go). */
enum { AT_START, AT_TRIM, AT_ROUND, AT_N };
static atomic_int stop_at[AT_N], stopped[AT_N], go[AT_N];
static struct tmo *_Atomic cur;

static void stop(struct tmo *e, int k)
{
	if (e != atomic_load(&cur) || !atomic_exchange(&stop_at[k], 0))
		return;
	atomic_store(&stopped[k], 1);
	while (!atomic_load(&go[k]))
		et_sleep_ns(100 * TMO_NSEC_PER_USEC);
}
static void start_hook(struct tmo *e) { stop(e, AT_START); }
static void trim_hook(struct tmo *e) { stop(e, AT_TRIM); }
static void round_hook(struct tmo *e) { stop(e, AT_ROUND); }

static void no_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

static struct tmo_timer first[FIRST], many[MANY];

struct many_arms {
	struct tmo *e;
	int accepted, err;
};

/* Arms up to MANY held timers of 60 s (cancelled later) until one is
 * refused. */
static void *arm_many(void *arg)
{
	struct many_arms *m = arg;
	for (int i = 0; i < MANY; i++) {
		int rc = tmo_arm(m->e, &many[i], 60 * SEC, no_cb, NULL);
		if (rc != 0) {
			m->err = rc;
			break;
		}
		m->accepted++;
	}
	return NULL;
}

static uint64_t pages(struct tmo *e) { return atomic_load(&e->pool.populated_pages); }

/* Arms and cancels timers [from, to) of `first`; returns the failures. */
static int arm_cancel(struct tmo *e, int from, int to)
{
	int bad = 0;
	for (int i = from; i < to; i++) {
		tmo_timer_init(&first[i]);
		bad += tmo_arm(e, &first[i], 60 * SEC, no_cb, NULL) != 0;
	}
	for (int i = from; i < to; i++)
		bad += tmo_cancel(e, &first[i]) != TMO_CANCEL_PREVENTED;
	return bad;
}

static void trim_inbox(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("mpsc", NULL, &e), 0);
	if (e == NULL)
		return;
	for (int k = 0; k < AT_N; k++)
		atomic_store(&stopped[k], 0), atomic_store(&go[k], 0);
	atomic_store(&cur, e);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	CHECK_EQ(arm_cancel(e, 0, FIRST), 0);
	atomic_store(&stop_at[AT_START], 1);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	int in = ET_WAIT_UNTIL(atomic_load(&stopped[AT_START]), WAIT);
	int bad = 0, start_trims = 0, start_bad = 0;
	uint64_t p0 = 0, p1 = 0, p2 = 0, gave0 = 0, gave = 0;
	struct many_arms m = {.e = e};
	if (in) {
		/* the timer thread holds no node of FIRST: all free, most in
		 * the depot; SECOND takes them into the inbox, cancelled */
		start_trims = (int)tmo__lf_trim_runs(e);
		start_bad = arm_cancel(e, 0, SECOND);
		atomic_store(&e->pool.pending_peak, 0);
		gave0 = atomic_load(&e->pool.trimmed_pages);
		atomic_store(&stop_at[AT_TRIM], 1);
		atomic_store(&go[AT_START], 1);
		in = ET_WAIT_UNTIL(atomic_load(&stopped[AT_TRIM]), WAIT);
	}
	if (in) {
		p0 = pages(e);
		for (int i = 0; i < MANY; i++)
			tmo_timer_init(&many[i]);
		pthread_t th;
		CHECK_EQ(pthread_create(&th, NULL, arm_many, &m), 0);
		CHECK_EQ(pthread_join(th, NULL), 0);
		p1 = pages(e);
		/* the next round begins after the trim and its sleep */
		atomic_store(&stop_at[AT_ROUND], 1);
		atomic_store(&go[AT_TRIM], 1);
		in = ET_WAIT_UNTIL(atomic_load(&stopped[AT_ROUND]), WAIT);
		p2 = pages(e);
		gave = atomic_load(&e->pool.trimmed_pages) - gave0;
	}
	uint64_t grew = p1 - p0;
	if (!in)
		printf("trim_inbox/mpsc: the timer thread never came to the hooks\n");
	else
		printf("trim_inbox/mpsc: a trim began with %d nodes of its %llu pages cancelled in the "
		       "inbox; while it held the depot a new thread's %d held arms: %d accepted, "
		       "then %s; the pool grew by %llu pages, %s one growth step (%u); the trim "
		       "gave back %llu (%llu pages after it)\n",
		       SECOND, (unsigned long long)p0, MANY, m.accepted,
		       m.err != 0 ? tmo_errname(m.err) : "none refused", (unsigned long long)grew,
		       grew > GROW_PAGES_MAX ? "more than" : "within", GROW_PAGES_MAX,
		       (unsigned long long)gave, (unsigned long long)p2);
	CHECK(in);
	CHECK_EQ(start_bad, 0);
	CHECK_EQ(start_trims, (int)tmo__lf_trim_runs(e) - 1);
	CHECK(m.err == 0 || m.err == TMO_EAGAIN);
	CHECK(grew <= GROW_PAGES_MAX);
	/* nothing lost: every accepted arm is still there to cancel */
	atomic_store(&go[AT_ROUND], 1);
	for (int i = 0; i < m.accepted; i++)
		bad += tmo_cancel(e, &many[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	atomic_store(&cur, NULL);
	CHECK_EQ(tmo_destroy(&e), 0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	atomic_store(&tmo__lf_hook_trim_start, start_hook);
	atomic_store(&tmo__lf_hook_trim, trim_hook);
	atomic_store(&tmo__lf_hook_round, round_hook);
	RUN(trim_inbox);
	return TEST_EXIT();
}
