/*
 * Order (guarantee 4) in the two interleavings of the lock-free core that
 * only a preemption opens (src/lf/timer.c, Order), each made to happen on
 * every run by a hook that holds a thread there (src/lf/hook.h).
 *
 *   transit  An owner spills its ring arm X (due LEAD from now) and is
 *            held with X in transit: out of its ring, not yet filed or in
 *            the inbox, announced in its record.  Meanwhile another thread
 *            arms Y, due GAP after X, and the timer thread runs rounds
 *            until one that began after Y was due has ended.  Then the
 *            owner goes on.  X must run before Y: a round fires nothing
 *            due at or after what an owner announces in transit.
 *   round    Y (due LEAD from now) is filed; the timer thread is held in
 *            a round after its steal and drain, before it collects; then
 *            Z is armed, due GAP before Y, and the clock passes Y's
 *            deadline.  Then the round goes on.  Z must run before Y: a
 *            round fires only what was due when it began (before its
 *            steal), and Z was armed after that.
 *
 * Both on mpsc (the inbox) and the wheel (the owner's own base).  A round
 * is judged when the test's own thread kept up (Y or Z could be armed as
 * the case says); an unjudged one is retried, and each case must be judged
 * once.  The waits are on state: the hook's flags, the timer thread's
 * round count, the clock's absolute deadlines.
 *
 * Built again with each defect planted (tests/hooked/hooked.cmake): the
 * order rule's two halves in src/lf/timer.c (the round's bound read after
 * its drain: hooked/lf_order-planted-now; nodes in transit not waited
 * for: -transit), each caught by its case on both engines; and a ring arm
 * that reads no TSC, dated by a clock read of whoever files it (never
 * early: -steal, src/lf/arm.c), which the round case catches on both:
 * Z, armed while the round is held, is dated when the next round steals
 * it, after Y's deadline.  That is why an arm stamps the TSC even when it
 * dies in its ring (docs/lockfree.md, Time).
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

#define MS TMO_NSEC_PER_MSEC
#define WAIT (30 * TMO_NSEC_PER_SEC)
#define LEAD (100 * MS)
#define TRIES 5

static void case_reset(void)
{
	hold_reset();
	seq_reset();
}

/* The gap between the two deadlines: over the resolution with room for
 * the dating's margin either way. */
static int64_t gap_of(struct tmo *e) { return 4 * e->resolution_ns + 4 * e->margin_ns; }

/* ---- transit ---------------------------------------------------------------------- */

struct owner {
	struct tmo *e, *away;
	struct tmo_timer x, fill[LF_RING_SLOTS];
	int64_t armed; /* a clock reading after X's arm */
	atomic_int fill_fires;
	int rc;
};

/* Arm X, then fill the ring until X's slot is needed again: that arm,
 * on the general path (hold.h, go_general), spills X, and the hook holds
 * this thread with X in transit. */
static void *owner_main(void *arg)
{
	struct owner *o = arg;
	owner_thread = 1;
	o->rc = tmo_arm(o->e, &o->x, LEAD, seq_cb, (void *)0);
	o->armed = tmo_now_ns();
	for (int i = 0; i < LF_RING_SLOTS && o->rc == 0; i++) {
		if (i == LF_RING_SLOTS - 1)
			o->rc = go_general(o->away);
		if (o->rc == 0)
			o->rc = tmo_arm(o->e, &o->fill[i], 60 * TMO_NSEC_PER_SEC, et_count_cb,
			                &o->fill_fires);
	}
	return NULL;
}

static int transit_round(const char *eng)
{
	case_reset();
	struct owner o = {0};
	struct tmo_timer y;
	tmo_timer_init(&y);
	tmo_timer_init(&o.x);
	for (int i = 0; i < LF_RING_SLOTS; i++)
		tmo_timer_init(&o.fill[i]);
	CHECK_EQ(tmo_create(eng, NULL, &o.e), 0);
	CHECK_EQ(tmo_create("mpsc", NULL, &o.away), 0);
	int64_t gap = gap_of(o.e);
	/* parked, the timer thread steals nothing: X stays in its slot until
	 * the owner spills it */
	CHECK_EQ(tmo_testing_park(o.e, 1), 0);
	atomic_store(&hold, HOLD_TRANSIT);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, owner_main, &o), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&held), WAIT));
	int64_t y_due = o.armed + LEAD + gap, now = tmo_now_ns();
	int judged = y_due - now > o.e->resolution_ns;
	if (judged)
		CHECK_EQ(tmo_arm(o.e, &y, y_due - now, seq_cb, (void *)1), 0);
	CHECK_EQ(tmo_testing_park(o.e, 0), 0);
	if (judged) {
		/* Y, armed while the timer thread was parked, is stolen by the
		 * first round after the unpark and may be dated then (its stamp
		 * far from the pair that round takes: capped by a clock read,
		 * never early), up to milliseconds after y_due under TSan: the
		 * rounds wait for that date, which a round that has ended since
		 * the unpark bounds */
		uint64_t k = rounds(o.e);
		CHECK(ET_WAIT_UNTIL(rounds(o.e) > k + 1, WAIT));
		int64_t y_dated = tmo_now_ns() + (y_due - now);
		CHECK(round_after(o.e, y_dated + 2 * o.e->resolution_ns, &seq_of[1]));
	}
	atomic_store(&release, 1);
	pthread_join(th, NULL);
	CHECK_EQ(o.rc, 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&seq_of[0]) != 0, WAIT));
	if (judged) {
		CHECK(ET_WAIT_UNTIL(atomic_load(&seq_of[1]) != 0, WAIT));
		if (atomic_load(&seq_of[1]) < atomic_load(&seq_of[0]))
			fprintf(stderr, "transit/%s: Y (due %.3f ms after X) ran before X, held in "
			        "transit by its owner\n", eng, (double)gap / MS);
		CHECK(atomic_load(&seq_of[0]) < atomic_load(&seq_of[1]));
	}
	for (int i = 0; i < LF_RING_SLOTS; i++)
		CHECK_EQ(tmo_cancel(o.e, &o.fill[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(atomic_load(&o.fill_fires), 0);
	CHECK_EQ(tmo_destroy(&o.e), 0);
	CHECK_EQ(tmo_destroy(&o.away), 0);
	return judged;
}

/* ---- round ------------------------------------------------------------------------ */

static int round_round(const char *eng)
{
	case_reset();
	struct tmo *e = NULL;
	struct tmo_timer y, z;
	tmo_timer_init(&y);
	tmo_timer_init(&z);
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	int64_t gap = gap_of(e);
	int64_t y_lo = tmo_now_ns() + LEAD;
	CHECK_EQ(tmo_arm(e, &y, LEAD, seq_cb, (void *)1), 0);
	int64_t y_hi = tmo_now_ns() + LEAD;
	/* a round that began after the arm has ended: Y is stolen, filed */
	CHECK(round_after(e, y_hi - LEAD, NULL));
	atomic_store(&hold, HOLD_ROUND);
	CHECK(ET_WAIT_UNTIL(atomic_load(&held), WAIT));
	int64_t z_due = y_lo - gap, now = tmo_now_ns();
	int judged = z_due - now > e->resolution_ns;
	if (judged)
		CHECK_EQ(tmo_arm(e, &z, z_due - now, seq_cb, (void *)0), 0);
	CHECK(ET_WAIT_UNTIL(tmo_now_ns() > y_hi + gap, WAIT));
	atomic_store(&release, 1);
	CHECK(ET_WAIT_UNTIL(atomic_load(&seq_of[1]) != 0, WAIT));
	if (judged) {
		CHECK(ET_WAIT_UNTIL(atomic_load(&seq_of[0]) != 0, WAIT));
		if (atomic_load(&seq_of[1]) < atomic_load(&seq_of[0]))
			fprintf(stderr, "round/%s: Y ran before Z (due %.3f ms before it), armed while "
			        "the round was held\n", eng, (double)gap / MS);
		CHECK(atomic_load(&seq_of[0]) < atomic_load(&seq_of[1]));
	}
	CHECK_EQ(tmo_destroy(&e), 0);
	return judged;
}

static void judged_once(int (*round)(const char *), const char *eng, const char *name)
{
	int judged = 0, tries = 0;
	while (!judged && tries < TRIES) {
		judged = round(eng);
		tries++;
	}
	printf("%s/%s: %s after %d tries\n", name, eng, judged ? "judged" : "NOT judged", tries);
	CHECK(judged);
}

int main(void)
{
	/* the timer thread never sleeps: its rounds keep coming while the
	 * test waits for them */
	tmo_testing_timely_timer(1);
	atomic_store(&tmo__lf_hook_transit, hold_transit);
	atomic_store(&tmo__lf_hook_round, hold_round);
	const char *engines[] = {"mpsc", "wheel"};
	for (int i = 0; i < 2; i++) {
		judged_once(transit_round, engines[i], "transit");
		judged_once(round_round, engines[i], "round");
	}
	return TEST_EXIT();
}
