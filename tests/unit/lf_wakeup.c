/*
 * The lock-free core's wake-up protocol under stress (src/lf/ec.c,
 * "Waking the timer thread"; src/lf/memory-order.md has the litmus form).
 *
 * Before it sleeps the timer thread sets LF_TW_SLEEPING, pays a StoreLoad
 * barrier (membarrier, or an sc fence when arms fence too), and looks at
 * every ring once more; an arm publishes its node, then reads the tick
 * word.  If either side's barrier were missing, an arm made while the
 * timer thread goes to sleep could be missed by both: the arm sees no
 * SLEEPING, the thread sees no arm, and it sleeps with nothing due.
 *
 * Each round here leaves the timer thread with nothing armed, so its only
 * way to run the next timer is that wake-up; waits a random time (0 to 6
 * of its poll intervals: its idle rounds, then its announcement of a
 * sleep, then the sleep), arms one timer due at once, and waits for it.  A
 * timer that does not run within WAIT is a lost wake-up: with membarrier
 * the thread would sleep forever.  Where arms fence (LF_TW_FENCE: no
 * membarrier, TSan, TMO_LF_FENCE=1) the thread never sleeps longer than
 * one poll, so a lost wake-up costs a poll and is not seen: the test says
 * so and exits 77.  The rounds must meet the thread both asleep and awake
 * (checked), else they did not cover the window.
 *
 * What this can show where: on a weakly ordered CPU (arm64, POWER) a
 * missing barrier on either side is caught by enough rounds.  On x86, and
 * on qemu-user (which runs arm64 code on the x86 host's ordering), only a
 * missing store-load barrier can ever show, since that is the one reorder
 * x86 makes; the test is still the protocol's stress and liveness check.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "lf_test.h"
#include "lf/lf.h"
#include "tmo/testing.h"

#define WAIT (5 * TMO_NSEC_PER_SEC)

static atomic_llong fired;

static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&fired, 1);
}

static void stress(const char *eng, long rounds)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	if (e == NULL)
		return;
	int64_t poll = e->tick_ns > 0 ? e->tick_ns : e->resolution_ns;
	struct tmo_timer t;
	tmo_timer_init(&t);
	atomic_store(&fired, 0);
	long asleep = 0, awake = 0, lost = 0;
	uint64_t rng = 0x5eedf00dULL;
	for (long i = 0; i < rounds && lost == 0; i++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		et_spin_ns((int64_t)((rng >> 33) % (uint64_t)(6 * poll)));
		if (atomic_load(&e->tickw) & LF_TW_SLEEPING)
			asleep++;
		else
			awake++;
		CHECK_EQ(tmo_arm(e, &t, 0, count_cb, NULL), 0);
		if (!et_wait_ge(&fired, i + 1, WAIT))
			lost++;
	}
	printf("  %s: %ld rounds (poll %lld us): the arm met the timer thread asleep %ld times, "
	       "awake %ld; lost wake-ups %ld\n",
	       eng, asleep + awake, (long long)(poll / 1000), asleep, awake, lost);
	CHECK_EQ(lost, 0);
	CHECK(asleep > 0 && awake > 0);
	tmo_destroy(&e);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (lf_test_skip_if_fence("the timer thread polls, a lost wake-up is not seen"))
		return 77;
	stress("mpsc", et_scaled(3000, 300));
	stress("wheel", et_scaled(500, 50));
	return TEST_EXIT();
}
