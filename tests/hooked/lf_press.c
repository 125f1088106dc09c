/*
 * No pages given back while arms are refused for want of nodes
 * (src/lf/pool.c, pressed; timer.c, announce_sleep).  A refill refused
 * growth raises the pool's flag; the timer thread, about to sleep, takes
 * it down and waits TRIM_DEFER before it trims, and waits again while the
 * flag keeps coming back up.  Before, it trimmed whenever it went to a
 * long sleep: mpsc in the sustain scenario beside two busy loops gave back
 * and populated again 3,942-5,413 pages in a 5 s run, and the pages that
 * refills grew while a trim held the depot's nodes (pool.c, may_grow)
 * took its peak to 614-979 KB, past the scenario's 896 KiB limit in CI
 * (results/2026-12-06-epyc2-98d286e).
 *
 * Each engine (mpsc, wheel), created with a cap of CAP nodes, its timer
 * thread parked: this thread arms 60 s timers until one is refused
 * (TMO_EAGAIN, the reservation used up): the flag must be up.  It cancels
 * all but KEEP of them (wholly free pages: a trim would give them back)
 * and lets the timer thread go.  While `pressure` is on, the round hook
 * raises the flag again in each round after the one that found it taken
 * down, as arms refused on and on would: the timer thread must take it
 * down LOOKS times (each a look at a trim it put off) with no trim run and
 * no page given back.  Pressure off, it must trim and give pages back.
 * Built again with the deferral planted out (TMO_LF_PLANT_TRIM_PRESSED:
 * hooked/lf_press-planted-pressed), which must report a trim on both.
 */
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
enum { CAP = 2048, KEEP = 64, LOOKS = 3, ARMS = CAP + PAGE_NODES };

static struct tmo_timer ts[ARMS];
static struct tmo *_Atomic cur;
static atomic_int pressure, looks;

static void no_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

/* The timer thread's round: the flag found down was taken down by the
 * look before (announce_sleep): count it, raise it again. */
static void round_hook(struct tmo *e)
{
	if (!atomic_load(&pressure) || e != atomic_load(&cur))
		return;
	if (!atomic_load(&e->pool.pressed)) {
		atomic_fetch_add(&looks, 1);
		atomic_store(&e->pool.pressed, 1);
	}
}

static uint64_t pages(struct tmo *e)
{
	return atomic_load(&e->pool.populated_pages);
}

static void one(const char *eng)
{
	struct tmo *e = NULL;
	tmo_testing_set_node_cap(CAP);
	int rc = tmo_create(eng, NULL, &e);
	tmo_testing_set_node_cap(0);
	CHECK_EQ(rc, 0);
	if (e == NULL)
		return;
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	int n = 0, err = 0, bad = 0;
	for (int i = 0; i < ARMS; i++)
		tmo_timer_init(&ts[i]);
	while (n < ARMS && (err = tmo_arm(e, &ts[n], 60 * SEC, no_cb, NULL)) == 0)
		n++;
	int raised = atomic_load(&e->pool.pressed);
	for (int i = KEEP; i < n; i++)
		bad += tmo_cancel(e, &ts[i]) != TMO_CANCEL_PREVENTED;
	uint64_t trims0 = tmo__lf_trim_runs(e), pages0 = pages(e);

	atomic_store(&looks, 0);
	atomic_store(&cur, e);
	atomic_store(&pressure, 1);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	/* every deadline 60 s away: it goes to sleep, and looks at a trim */
	int went =
	    ET_WAIT_UNTIL(atomic_load(&looks) >= LOOKS || tmo__lf_trim_runs(e) != trims0, WAIT);
	uint64_t trims1 = tmo__lf_trim_runs(e), pages1 = pages(e);
	int looked = atomic_load(&looks);
	atomic_store(&pressure, 0);
	/* (a trim that ran under pressure is reported below, not waited on) */
	int back = trims1 != trims0 ||
	           ET_WAIT_UNTIL(tmo__lf_trim_runs(e) > trims1 && pages(e) < pages0, WAIT);
	uint64_t pages2 = pages(e);

	if (err != TMO_EAGAIN || !raised)
		printf("press/%s: %d arms, then %s; the flag %s\n", eng, n, tmo_errname(err),
		       raised ? "up" : "still down");
	else if (trims1 != trims0 || pages1 != pages0)
		printf("press/%s: the timer thread trimmed while arms were refused (%llu trims, "
		       "%llu of %llu pages given back, after %d looks)\n",
		       eng, (unsigned long long)(trims1 - trims0),
		       (unsigned long long)(pages0 - pages1), (unsigned long long)pages0, looked);
	else
		printf("press/%s: refused after %d arms; %d looks at a trim while refusals went on, "
		       "%llu pages kept; then %s, %llu pages\n",
		       eng, n, looked, (unsigned long long)pages0,
		       back ? "trimmed" : "no trim gave pages back", (unsigned long long)pages2);
	CHECK_EQ(err, TMO_EAGAIN);
	CHECK(raised);
	CHECK_EQ(bad, 0);
	CHECK(went);
	CHECK(looked >= LOOKS);
	CHECK_EQ(trims1, trims0);
	CHECK_EQ(pages1, pages0);
	CHECK(back);
	for (int i = 0; i < KEEP && i < n; i++)
		CHECK_EQ(tmo_cancel(e, &ts[i]), TMO_CANCEL_PREVENTED);
	atomic_store(&cur, NULL);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void press(void)
{
	one("mpsc");
	one("wheel");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	atomic_store(&tmo__lf_hook_round, round_hook);
	RUN(press);
	return TEST_EXIT();
}
