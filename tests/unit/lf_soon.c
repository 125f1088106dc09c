/*
 * A soon list the timer thread cannot take holds the round back
 * (src/lf/fire.c, take_soon and tmo__lf_collect_all).  An owner hands the
 * timers of its base due within LF_SOON_NS to the timer thread on its
 * soon list; the timer thread makes room in its due array for the list's
 * QUEUED nodes, and when it cannot (out of memory) the list goes back for
 * the next round.  Nodes left there may be due before anything else the
 * round collected, so the round fires nothing.  Before, it fired what it
 * had: the later timers ran before the list's.
 *
 * The wheel, its timer thread parked: this thread arms NA timers of
 * 100 us, due at once, which its base hands over (an owner hands what is
 * due within LF_SOON_NS of the latest tick: the test moves the tick on
 * as a ticking timer thread would), NA more than the due array's first
 * DUE_FIRST entries; then NB of 1 s, kept in its wheel (the arms take
 * milliseconds).  Past the 1 s, with every allocation refused, the timer
 * thread is let go: it must try to make room (the fault is asked) and
 * fire nothing while it cannot; allocations given back, every A must run
 * before every B.  Before (9c05d5e, 98d286e): 108 fired while it could
 * not (the B timers and the ring's last 8 A), and 2,992 of the A ran
 * after a B.
 */
#include <stdatomic.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "lf/lf.h"
#include "tmo/testing.h"

#define WAIT (30 * TMO_NSEC_PER_SEC)
enum { NA = 3000, NB = 100, N = NA + NB, TRIES = 5 };

static struct tmo_timer ts[N];
static atomic_int seq_next, fired, faulting, fault_calls;
static int seq[N];

static void record(struct tmo_timer *t, void *arg)
{
	(void)t;
	seq[(intptr_t)arg] = atomic_fetch_add(&seq_next, 1);
	atomic_fetch_add(&fired, 1);
}

static int fail_alloc(enum tmo_fault_kind kind, void *ctx)
{
	(void)ctx;
	if (kind != TMO_FAULT_ALLOC || !atomic_load(&faulting))
		return 0;
	atomic_fetch_add(&fault_calls, 1);
	return 1;
}

static void soon(void)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create("wheel", NULL, &e), 0);
	if (e == NULL)
		return;
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	int bad = 0;
	int64_t t0 = tmo_now_ns();
	for (intptr_t i = 0; i < N; i++) {
		if (i % 64 == 0) /* a tick (base.c, coarse_now: what an owner hands over) */
			atomic_store(&e->tick_at, tmo_now_ns());
		tmo_timer_init(&ts[i]);
		int64_t timeout = i < NA ? 100 * TMO_NSEC_PER_USEC : TMO_NSEC_PER_SEC;
		bad += tmo_arm(e, &ts[i], timeout, record, (void *)i) != 0;
	}
	int64_t armed = tmo_now_ns() - t0;
	CHECK_EQ(bad, 0);
	/* every deadline passed (a wait for the clock, not for a thread) */
	ET_WAIT_UNTIL(tmo_now_ns() > t0 + TMO_NSEC_PER_SEC + 10 * TMO_NSEC_PER_MSEC, WAIT);

	tmo_testing_set_fault(fail_alloc, NULL);
	atomic_store(&faulting, 1);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	int tried = ET_WAIT_UNTIL(atomic_load(&fault_calls) >= TRIES || atomic_load(&fired) > 0, WAIT);
	int early = atomic_load(&fired);
	atomic_store(&faulting, 0);
	tmo_testing_set_fault(NULL, NULL);
	int all = ET_WAIT_UNTIL(atomic_load(&fired) == N, WAIT);

	int a_last = -1, b_first = N, a_after = 0;
	for (int i = 0; i < NA; i++)
		a_last = seq[i] > a_last ? seq[i] : a_last;
	for (int i = NA; i < N; i++)
		b_first = seq[i] < b_first ? seq[i] : b_first;
	for (int i = 0; i < NA; i++)
		a_after += seq[i] > b_first;
	printf("soon: %d + %d timers armed in %.1f ms; out of memory, %d allocations refused, "
	       "%d fired; then %d of %d fired, %d of the 100 us ones after a 1 s one\n",
	       NA, NB, armed / 1e6, atomic_load(&fault_calls), early, atomic_load(&fired), N,
	       a_after);
	/* the B timers handed over too would prove nothing (900 ms: a
	 * margin of hundreds over what the arms take) */
	CHECK(armed < 900 * TMO_NSEC_PER_MSEC);
	CHECK(tried);
	CHECK(atomic_load(&fault_calls) >= TRIES);
	CHECK_EQ(early, 0);
	CHECK(all);
	CHECK_EQ(a_after, 0);
	CHECK(a_last < b_first);
	CHECK_EQ(tmo_destroy(&e), 0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	RUN(soon);
	return TEST_EXIT();
}
