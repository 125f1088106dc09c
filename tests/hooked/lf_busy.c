/*
 * Order (guarantee 4) while a per-thread base is busy: its owner holds the
 * base's lock, and the timer thread, which cannot collect from it, holds
 * back what the base may hold (src/lf/fire.c, busy_hold).  The base's
 * `next` is its wheel's next tick, a deadline rounded UP: the base may
 * hold a timer due up to a resolution before it, and that timer was dated
 * up to two floors after its arm.
 *
 * The wheel (mpsc has no per-thread bases), the timer thread parked while
 * the owner arms A, due LEAD from now and a little before a tick's start
 * by the clock reads around its arm, so that its dating's margin files it
 * in the tick after; then two more arms, and three arms on the general
 * path (hold.h, go_general) spill all three into the owner's base.
 * Another thread cancels one of them, which leaves it on the base's
 * cancel stack: the timer thread tidies it and stores the base's `next`,
 * A's tick (S).  The owner then cancels another of its arms and the hook
 * holds it inside its base's lock, with nothing in transit.  A callback on
 * the timer thread arms B, due by a clock read just before S: more than
 * the resolution after A by the clock reads around both arms, in A's tick.
 * Rounds run past S while the owner is held; then it goes on.  A must run
 * before B.  A round is judged when the clocks allowed the case (A dated
 * into the tick after the reads, B armed in time): an unjudged one is
 * retried, and the case must be judged once.
 *
 * Built again with the busy base's old hold planted (hold back only from
 * `next` on: TMO_LF_PLANT_BUSY_HOLD, hooked/lf_busy-planted-hold), which
 * must report B run before A.  Before the fix expiry at 1e6 beside four
 * hogs failed so in 2 runs of 20 (issue 19).
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
#include "lf/node.h"
#include "lf/pool.h"
#include "lf/schedule.h"
#include "tmo/testing.h"

#define US TMO_NSEC_PER_USEC
#define MS TMO_NSEC_PER_MSEC
#define WAIT (30 * TMO_NSEC_PER_SEC)
#define LONG (60 * TMO_NSEC_PER_SEC)
/* A 10 ms tick: its margin's floor (a twentieth, 500 us) is the room the
 * case has for A's arm and B's, which under qemu beside other tests took
 * more than the 1 ms tick's 50 us (the callback's arm of B: 7 tries of 8
 * too late once) */
#define RES (10 * MS)
#define LEAD (100 * MS)
#define C_LEAD (30 * MS) /* C, which arms B, is due this before S */
#define TRIES 8

/* seq_cb (hold.h): arg 0 is A, 1 is B. */
/* C's callback, on the timer thread: B, due at `b_due` by its clock read. */
struct bcase {
	struct tmo *e;
	struct tmo_timer b;
	int64_t b_due, b_hi; /* b_hi: a clock read after B's arm, plus its timeout */
	atomic_int armed;    /* 1 armed, -1 too late */
};
static void c_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	struct bcase *c = arg;
	int64_t now = tmo_now_ns(), to = c->b_due - now;
	if (to <= 0 || tmo_arm(c->e, &c->b, to, seq_cb, (void *)1) != 0) {
		atomic_store(&c->armed, -1);
		return;
	}
	c->b_hi = tmo_now_ns() + to;
	atomic_store(&c->armed, 1);
}

/* W's callback, on the timer thread: an arm and a cancel of its own, so
 * that its cache holds nodes and C's arm of B is quick.  The nodes the
 * timer thread frees after other threads' cancels (P's) go back to those
 * threads (src/lf/depot.c, Homes); with its cache empty, C's arm grew the
 * pool, which under TSan took 0.3-0.7 ms: B armed after S, not judged, in
 * every try. */
struct warm {
	struct tmo *e;
	struct tmo_timer x;
	atomic_int done; /* 1 armed and cancelled, -1 failed */
};
static void x_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg; /* cancelled at once */
}
static void warm_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	struct warm *w = arg;
	int ok = tmo_arm(w->e, &w->x, LONG, x_cb, NULL) == 0 &&
	         tmo_cancel(w->e, &w->x) == TMO_CANCEL_PREVENTED;
	atomic_store(&w->done, ok ? 1 : -1);
}

struct owner {
	struct tmo *e, *away;
	struct tmo_timer a, p, q, fill[LF_RING_SLOTS];
	int64_t a_hi; /* a clock read after A's arm, plus its timeout */
	atomic_int phase;   /* 1: A, P, Q spilled; 2: the main thread says go on */
	atomic_int fill_fires;
	atomic_int q_done; /* Q's cancel returned */
	int rc, q_rc;
};

/* The first tick start at or after t. */
static int64_t tick_ceil(const struct tmo *e, int64_t t)
{
	int64_t r = e->resolution_ns, d = t - e->origin_ns;
	return e->origin_ns + (d + r - 1) / r * r;
}

static void *owner_main(void *arg)
{
	struct owner *o = arg;
	owner_thread = 1;
	/* this thread's record made, its cache filled: A's arm is quick */
	o->rc = tmo_arm(o->e, &o->a, LONG, seq_cb, (void *)0);
	if (o->rc == 0 && tmo_cancel(o->e, &o->a) != TMO_CANCEL_PREVENTED)
		o->rc = -1;
	/* A's reads end half a floor before a tick starts; dated at its upper
	 * bound (the floor after its stamp), it lands after it */
	int64_t now = tmo_now_ns();
	int64_t due = tick_ceil(o->e, now + LEAD) - o->e->margin_ns / 2;
	now = tmo_now_ns();
	if (o->rc == 0)
		o->rc = tmo_arm(o->e, &o->a, due - now, seq_cb, (void *)0);
	o->a_hi = tmo_now_ns() + (due - now);
	if (o->rc == 0)
		o->rc = tmo_arm(o->e, &o->p, LONG, et_count_cb, &o->fill_fires);
	if (o->rc == 0)
		o->rc = tmo_arm(o->e, &o->q, LONG, et_count_cb, &o->fill_fires);
	/* the ring's slots once round; the last three arms, on the general
	 * path, spill A, P and Q into our base */
	for (int i = 0; i < LF_RING_SLOTS && o->rc == 0; i++) {
		if (i >= LF_RING_SLOTS - 3)
			o->rc = go_general(o->away);
		if (o->rc == 0)
			o->rc = tmo_arm(o->e, &o->fill[i], LONG, et_count_cb, &o->fill_fires);
	}
	atomic_store(&o->phase, 1);
	while (atomic_load(&o->phase) != 2)
		et_sleep_ns(100 * US);
	/* held inside our base's lock (the hook) */
	o->q_rc = tmo_cancel(o->e, &o->q);
	atomic_store(&o->q_done, 1);
	return NULL;
}

static int busy_round(void)
{
	hold_reset();
	seq_reset();
	struct owner o = {0};
	struct bcase c = {0};
	struct tmo_timer ct;
	tmo_timer_init(&ct);
	tmo_timer_init(&c.b);
	tmo_timer_init(&o.a);
	tmo_timer_init(&o.p);
	tmo_timer_init(&o.q);
	for (int i = 0; i < LF_RING_SLOTS; i++)
		tmo_timer_init(&o.fill[i]);
	struct tmo_config cfg = {.resolution_ns = RES};
	CHECK_EQ(tmo_create("wheel", &cfg, &o.e), 0);
	CHECK_EQ(tmo_create("mpsc", NULL, &o.away), 0);
	struct tmo *e = o.e;
	c.e = e;
	const struct lf_sched *sc = e->p->sched;
	/* a calibration, so that A is dated by its TSC stamp; then parked,
	 * the timer thread steals nothing from the owner's ring */
	CHECK(ET_WAIT_UNTIL(atomic_load(&e->cal.rate_fx) != 0, WAIT));
	struct warm w = {.e = e};
	struct tmo_timer wt;
	tmo_timer_init(&wt);
	tmo_timer_init(&w.x);
	CHECK_EQ(tmo_arm(e, &wt, 1, warm_cb, &w), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&w.done) != 0, WAIT));
	CHECK_EQ(atomic_load(&w.done), 1);
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, owner_main, &o), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&o.phase) == 1, WAIT));
	CHECK_EQ(o.rc, 0);
	struct lf_node *na = node_of(e, &o.a), *np = node_of(e, &o.p), *nq = node_of(e, &o.q);
	uintptr_t aux = atomic_load(&na->aux);
	CHECK((aux & 3u) == LF_IN_THREAD);
	struct lf_base *b = (struct lf_base *)(aux & ~(uintptr_t)3);
	CHECK(lf_st_of(atomic_load(&na->state)) == LF_IN_STRUCT && sc->contains(na));
	CHECK(sc->contains(np) && sc->contains(nq) && atomic_load(&np->aux) == aux);
	int64_t d_a = sc->deadline(na), s = tick_ceil(e, d_a);
	c.b_due = s - e->margin_ns / 4; /* by a clock read, a quarter floor before S */
	/* A lies in the tick ending at S while its reads end more than B's
	 * lead before S less the resolution */
	const char *why = NULL;
	if (!(d_a > s - e->resolution_ns && c.b_due > o.a_hi + e->resolution_ns))
		why = "A's arm was slow";
	/* P onto the base's cancel stack: the timer thread tidies it, then
	 * stores the base's next tick, A's */
	CHECK_EQ(tmo_cancel(e, &o.p), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&b->next) == s, WAIT));
	atomic_store(&hold, HOLD_OWNER_IN);
	atomic_store(&o.phase, 2);
	/* The hook holds the owner only where its cancel won its own base's
	 * trylock; the timer thread inside the base just then (collecting,
	 * tidying) sends the cancel to the base's cancel stack instead, and
	 * the cancel returns: a round not judged (fresh-root CI run 40 waited
	 * 30 s for the hold there, under TSan) */
	CHECK(ET_WAIT_UNTIL(atomic_load(&held) || atomic_load(&o.q_done), WAIT));
	if (!atomic_load(&held)) {
		atomic_store(&hold, HOLD_NONE);
		if (why == NULL)
			why = "Q's cancel found the base busy";
	}
	int64_t now = tmo_now_ns();
	if (why == NULL && (s - C_LEAD - now <= 0 || atomic_load(&seq_of[0]) != 0))
		why = "the set-up was slow";
	if (why == NULL) {
		CHECK_EQ(tmo_arm(e, &ct, s - C_LEAD - now, c_cb, &c), 0);
		CHECK(ET_WAIT_UNTIL(atomic_load(&c.armed) != 0, WAIT));
		if (atomic_load(&c.armed) != 1 || c.b_hi >= s)
			why = "C ran late";
	}
	int judged = why == NULL;
	/* rounds past S, the owner inside its base's lock all along */
	CHECK(round_after(e, s + 2 * e->resolution_ns, NULL));
	int b_first = atomic_load(&seq_of[1]) != 0;
	atomic_store(&release, 1);
	pthread_join(th, NULL);
	CHECK_EQ(o.q_rc, TMO_CANCEL_PREVENTED);
	CHECK(ET_WAIT_UNTIL(atomic_load(&seq_of[0]) != 0, WAIT));
	if (judged) {
		CHECK(ET_WAIT_UNTIL(atomic_load(&seq_of[1]) != 0, WAIT));
		if (b_first || atomic_load(&seq_of[1]) < atomic_load(&seq_of[0]))
			fprintf(stderr, "busy/wheel: B (due %.3f ms after A by the clock reads "
			        "around their arms) ran before A, held in its owner's busy base\n",
			        (double)(c.b_due - o.a_hi) / MS);
		CHECK(!b_first && atomic_load(&seq_of[0]) < atomic_load(&seq_of[1]));
	} else {
		printf("busy/wheel: not judged (%s): A dated %.3f ms after its reads, %.3f ms "
		       "into its tick; B due %.3f ms after A's reads\n",
		       why, (double)(d_a - o.a_hi) / MS, (double)(d_a - s + e->resolution_ns) / MS,
		       (double)(c.b_due - o.a_hi) / MS);
		/* B, if C armed it late, is due before S: it runs */
		if (atomic_load(&c.armed) == 1)
			CHECK(ET_WAIT_UNTIL(atomic_load(&seq_of[1]) != 0, WAIT));
	}
	for (int i = 0; i < LF_RING_SLOTS; i++)
		CHECK_EQ(tmo_cancel(e, &o.fill[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(atomic_load(&o.fill_fires), 0);
	CHECK_EQ(tmo_destroy(&o.e), 0);
	CHECK_EQ(tmo_destroy(&o.away), 0);
	return judged;
}

int main(void)
{
	/* the timer thread never sleeps, and every stamp dates its arm: its
	 * rounds keep coming while the test waits for them */
	tmo_testing_timely_timer(1);
	atomic_store(&tmo__lf_hook_owner_in, hold_owner_in);
	int judged = 0, tries = 0;
	while (!judged && tries < TRIES && tmo_test_failures == 0) {
		judged = busy_round();
		tries++;
	}
	printf("busy/wheel: %s after %d tries\n", judged ? "judged" : "NOT judged", tries);
	CHECK(judged);
	return TEST_EXIT();
}
