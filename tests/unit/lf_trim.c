/*
 * Frees that follow the timer thread's trim are given back too
 * (src/lf/depot.c, tmo__lf_cache_spill; timer.c, announce_sleep).  The
 * wheel's cancels free their nodes into the cancelling thread's cache,
 * which spills chains to the thread's spare; a spill that finds the timer
 * thread asleep with more free nodes in the depot and that spare than a
 * trim keeps (TRIM_KEEP) asks it to trim, TRIM_DEFER later (the trim takes
 * every spare and home too).  Before, only a depot past 256 woke
 * it: the tail of a stream of cancels stayed until its next long sleep
 * (the retention scenario read 100-600 free nodes 100 ms after its last
 * batch, 39-72 KiB held).
 *
 * A round: 1,024 held 120 s timers, all but the last 48 cancelled; a
 * 1 ms timer fires, and the timer thread, asleep again, has trimmed (on
 * state); then the last 48 are cancelled.  The round is judged when the
 * depot and the spare then hold more than TRIM_KEEP and at most 256 free
 * nodes (a trim is owed, and the old rule would not have woken for it; a
 * machine that wakes the thread meanwhile for any other reason makes the
 * round prove nothing, and it is retried): a trim must follow.  The trim
 * waited for is a finished one: `trim_runs` counts a trim as it ends
 * (counted as it began, the test read the depot mid-trim, 0 or all of
 * it, and judged no round in CI's ASan run).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "engine_test.h"
#include "lf/debug.h"
#include "lf/depot.h"

#define N 1024
#define LAST 48
#define OLD_WAKE 256 /* free nodes in the depot that woke the trim before */
#define ROUNDS 5
#define WAIT (30 * TMO_NSEC_PER_SEC)

static struct tmo_timer ts[N + 1];
static atomic_int short_fired;

static void never_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	abort(); /* 120 s: never due here */
}

static void short_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&short_fired, 1);
}

static int asleep_trimmed(struct tmo *e, uint64_t since)
{
	return (atomic_load(&e->tickw) & LF_TW_SLEEPING) && !atomic_load(&e->pool.trim_asked) &&
	       tmo__lf_trim_runs(e) > since;
}

/* Returns 1 when the round was judged. */
static int round_once(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	long bad = 0;
	for (int i = 0; i <= N; i++) /* a timer stays with the engine of a round before */
		tmo_timer_init(&ts[i]);
	for (int i = 0; i < N; i++)
		bad += tmo_arm(e, &ts[i], 120 * TMO_NSEC_PER_SEC, never_cb, NULL) != 0;
	for (int i = 0; i < N - LAST; i++)
		bad += tmo_cancel(e, &ts[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	atomic_store(&short_fired, 0);
	uint64_t before = tmo__lf_trim_runs(e);
	CHECK_EQ(tmo_arm(e, &ts[N], TMO_NSEC_PER_MSEC, short_cb, NULL), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&short_fired) == 1, WAIT));
	CHECK(ET_WAIT_UNTIL(asleep_trimmed(e, before), WAIT));
	uint64_t r0 = tmo__lf_trim_runs(e);
	for (int i = N - LAST; i < N; i++)
		bad += tmo_cancel(e, &ts[i]) != TMO_CANCEL_PREVENTED;
	CHECK_EQ(bad, 0);
	/* free nodes outside the caches: the depot and the thread's spare
	 * (src/lf/depot.c, Spares), what the spill's wake-up counts */
	uint64_t depot = atomic_load(&e->pool.depot_nodes) + tmo__lf_spares_count(e);
	int judged = depot > TRIM_KEEP && depot <= OLD_WAKE && tmo__lf_trim_runs(e) == r0;
	if (!judged) {
		printf("  round: %llu free nodes in the depot after the last cancels, %llu trims "
		       "meanwhile: not judged\n",
		       (unsigned long long)depot, (unsigned long long)(tmo__lf_trim_runs(e) - r0));
	} else {
		int64_t t0 = tmo_now_ns();
		int trimmed = ET_WAIT_UNTIL(tmo__lf_trim_runs(e) > r0, WAIT);
		printf("  round: %llu free nodes in the depot after the last cancels: %s (%.1f ms)\n",
		       (unsigned long long)depot, trimmed ? "trimmed" : "never trimmed",
		       (double)(tmo_now_ns() - t0) / 1e6);
		CHECK(trimmed);
	}
	CHECK_EQ(tmo_destroy(&e), 0);
	return judged;
}

int main(void)
{
	int judged = 0;
	for (int r = 0; r < ROUNDS && judged == 0; r++)
		judged += round_once();
	CHECK(judged > 0);
	return TEST_EXIT();
}
