/*
 * The engine contract (include/tmo/tmo.h, "Guarantees" and the cancel
 * Return: list), cancelling, checked on one engine:
 * `test_engine_contract_cancel ENGINE [CASE]`.  A cancel that returns
 * before the deadline has prevented the fire; after the fire it answers
 * FIRED, from inside the callback SELF, and while the callback runs it
 * waits for it (WAITED); a callback re-arms its own timer, and a cancel
 * racing that re-arm prevents it; cancelling half of many timers due at one
 * instant changes nothing for the others.  How every case is built:
 * tests/kit/contract_test.h.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract_test.h"
#include "engine_test.h"

static void probe_cb(struct tmo_timer *t, void *arg) { (void)t, (void)arg; }

/* The measured cost of an arm+cancel pair (the worst of 3): deadlines that
 * must leave room to arm and cancel many timers first are sized from it. */
static int64_t pair_cost(struct tmo *e)
{
	int64_t worst = 0;
	for (int k = 0; k < 3; k++) {
		struct tmo_timer probe = TMO_TIMER_INIT;
		int64_t t0 = tmo_now_ns();
		CHECK_EQ(ct_arm(e, &probe, TMO_NSEC_PER_SEC, probe_cb, NULL), 0);
		CHECK_EQ(tmo_cancel(e, &probe), TMO_CANCEL_PREVENTED);
		int64_t d = tmo_now_ns() - t0;
		worst = d > worst ? d : worst;
	}
	return worst;
}

/* Rounds whose result depends on the machine reaching a point before a
 * deadline (not on the engine) are retried with the deadline this many
 * times further away, doubling each time: 2^5 x the first. */
#define ROUNDS 6

/* ---- cancel before the deadline, after the fire, from inside ------------- */

/* The total of the counted timers (et_counted) of the cancel-before,
 * cancel-after-fire and independence cases. */
static atomic_llong cnt_total;

/* One round on a fresh engine: N timers due `margin` and more from now, all
 * cancelled at once.  A cancel that RETURNED before its timer's deadline
 * must have prevented it: by "never early" its callback cannot have started
 * (judging by when the cancel was called instead would blame the engine for
 * a preemption between the clock read and the cancel).  A cancel that
 * returned later may find it fired, and then it fires exactly once.
 * Returns how many cancels returned before their deadline; *wrong counts
 * the violations. */
static int cbd_round(int64_t margin, int *wrong)
{
	enum { N = 50 };
	struct et_counted s[N];
	int64_t deadline[N];
	et_counted_init(s, N, &cnt_total);
	struct tmo *e = ct_new_engine();
	if (!e)
		return 0;
	atomic_store(&cnt_total, 0);
	for (int i = 0; i < N; i++) {
		int64_t timeout = margin + i * 200 * US;
		deadline[i] = tmo_now_ns() + timeout; /* no later than the engine's */
		CHECK_EQ(ct_arm(e, &s[i].t, timeout, et_counted_cb, &s[i]), 0);
	}
	int prevented = 0, in_time = 0;
	for (int i = 0; i < N; i++) {
		int rc = tmo_cancel(e, &s[i].t);
		int64_t returned = tmo_now_ns();
		if (returned < deadline[i]) {
			in_time++;
			if (rc != TMO_CANCEL_PREVENTED) {
				fprintf(stderr, "cancel-before: timer %d: %s, returned %lld us before its "
				        "deadline\n",
				        i, et_result_name(rc), (long long)((deadline[i] - returned) / US));
				++*wrong;
			}
		} else if (rc != TMO_CANCEL_PREVENTED && !ct_is_resolved(rc)) {
			++*wrong;
		}
		prevented += rc == TMO_CANCEL_PREVENTED;
	}
	/* Only what was not prevented fires: wait for it (LIVENESS past the
	 * last deadline: a retried round's may lie seconds ahead), then a
	 * little more for a prevented timer that fires anyway. */
	CHECK(et_wait_ge(&cnt_total, N - prevented, deadline[N - 1] - tmo_now_ns() + LIVENESS));
	et_sleep_ns(deadline[N - 1] - tmo_now_ns() + 20 * MS);
	CHECK_EQ(atomic_load(&cnt_total), N - prevented);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.cancelled, prevented);
	CHECK_EQ(st.fired, N - prevented);
	CHECK_EQ(st.pending, 0);
	ct_destroy_engine(&e);
	if (in_time < N)
		printf("  cancel-before: %d of %d cancels returned after their deadline (a slow "
		       "machine)\n",
		       N - in_time, N);
	return in_time;
}

static void test_cancel_before_deadline(void)
{
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	/* room to arm them all before the first deadline: 100 ms plus twice the
	 * measured cost of 50 arm+cancel pairs */
	int64_t margin = 100 * MS + 2 * 50 * pair_cost(e);
	ct_destroy_engine(&e);
	int wrong = 0, in_time = 0;
	for (int r = 0; r < ROUNDS && in_time < 25; r++, margin *= 2)
		in_time = cbd_round(margin, &wrong);
	CHECK_EQ(wrong, 0);
	/* Not a check on the engine: that the case exercised what it checks. */
	if (in_time < 25)
		fprintf(stderr, "cancel-before: in %d rounds, the last %lld ms ahead, fewer than half "
		        "the cancels returned before their deadline\n",
		        ROUNDS, (long long)(margin / 2 / MS));
	CHECK(in_time >= 25);
}

static void test_cancel_after_fire(void)
{
	struct et_counted s;
	et_counted_init(&s, 1, &cnt_total);
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	atomic_store(&cnt_total, 0);
	for (int round = 1; round <= 3; round++) {
		/* the same timer again after each resolution */
		CHECK_EQ(ct_arm(e, &s.t, MS, et_counted_cb, &s), 0);
		CHECK(et_wait_ge(&cnt_total, round, LIVENESS));
		CHECK_EQ(et_cancel_settled(e, &s.t), TMO_CANCEL_FIRED);
		CHECK_EQ(atomic_load(&s.fires), round);
	}
	ct_destroy_engine(&e);
}

struct self_ctx {
	struct tmo_timer t;
	struct tmo *e;
	int rearm; /* re-arm (10 s) before cancelling itself */
	int rc_rearm, rc_cancel;
	atomic_int fires;
	atomic_llong done;
};

static void self_cb(struct tmo_timer *t, void *arg)
{
	struct self_ctx *c = arg;
	atomic_fetch_add(&c->fires, 1);
	if (c->rearm)
		c->rc_rearm = tmo_arm(c->e, t, 10 * TMO_NSEC_PER_SEC, self_cb, c);
	c->rc_cancel = tmo_cancel(c->e, t);
	atomic_store(&c->done, 1);
}

static void test_cancel_self(void)
{
	struct self_ctx c;
	memset(&c, 0, sizeof c);
	c.e = ct_new_engine();
	if (!c.e)
		return;
	CHECK_EQ(ct_arm(c.e, &c.t, 0, self_cb, &c), 0);
	CHECK(et_wait_ge(&c.done, 1, LIVENESS));
	CHECK_EQ(c.rc_cancel, TMO_CANCEL_SELF);
	CHECK_EQ(et_cancel_settled(c.e, &c.t), TMO_CANCEL_FIRED);
	CHECK_EQ(atomic_load(&c.fires), 1);

	/* Re-armed, then cancelled from inside: the new arm must be accounted
	 * exactly once.  Either that cancel prevented it, or (SELF) it is still
	 * pending and a cancel from here prevents it. */
	atomic_store(&c.done, 0);
	atomic_store(&c.fires, 0);
	c.rearm = 1;
	CHECK_EQ(ct_arm(c.e, &c.t, 0, self_cb, &c), 0);
	CHECK(et_wait_ge(&c.done, 1, LIVENESS));
	CHECK_EQ(c.rc_rearm, 0);
	if (c.rc_cancel == TMO_CANCEL_SELF) {
		/* a cancel that finds the callback still running waits for it,
		 * then prevents the re-arm (10 s away) */
		printf("  cancel-self after re-arm: SELF; the re-arm stays pending\n");
		CHECK_EQ(tmo_cancel(c.e, &c.t), TMO_CANCEL_PREVENTED);
	} else {
		CHECK_EQ(c.rc_cancel, TMO_CANCEL_PREVENTED);
		CHECK_EQ(et_cancel_settled(c.e, &c.t), TMO_ENOTARMED);
	}
	CHECK_EQ(atomic_load(&c.fires), 1);
	ct_destroy_engine(&c.e);
}

/* ---- cancel waits for a callback running on the engine thread ------------ */

/* The callback runs for `hold` after it has said it started; a cancel
 * called meanwhile must wait for it (WAITED) and return after it returned.
 * Whatever the answer, cancel never returns while the callback runs.  A
 * cancel that a preemption delayed past the callback's end may rightly
 * answer FIRED: that proves nothing about waiting, so the case is run again
 * with a longer hold until three cancels waited. */
struct wait_ctx {
	struct tmo_timer t;
	int64_t hold;
	atomic_llong started;
	atomic_int returned;
	int64_t t_start, t_return;
};

static void wait_cb(struct tmo_timer *t, void *arg)
{
	struct wait_ctx *c = arg;
	c->t_start = tmo_now_ns();
	atomic_store(&c->started, 1);
	et_sleep_ns(c->hold);
	c->t_return = tmo_now_ns();
	atomic_store(&c->returned, 1);
}

static void test_cancel_waits_for_running(void)
{
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	int waited = 0, fired = 0;
	int64_t hold = 40 * MS;
	for (int i = 0; i < 12 && waited < 3; i++) {
		struct wait_ctx c;
		memset(&c, 0, sizeof c);
		c.hold = hold;
		CHECK_EQ(ct_arm(e, &c.t, (i % 3) * MS, wait_cb, &c), 0);
		CHECK(et_wait_ge(&c.started, 1, LIVENESS));
		int64_t t_call = tmo_now_ns();
		int rc = tmo_cancel(e, &c.t);
		int64_t t_ret = tmo_now_ns();
		int returned = atomic_load(&c.returned);
		/* never returns while the callback runs */
		CHECK_EQ(returned, 1);
		if (!returned) {
			/* c is the running callback's: it must outlive it */
			fprintf(stderr, "cancel-waited: cancel returned %s while the callback ran\n",
			        et_result_name(rc));
			CHECK(ET_WAIT_UNTIL(atomic_load(&c.returned), LIVENESS));
			break;
		}
		if (rc == TMO_CANCEL_WAITED) {
			/* proof of waiting: the callback's return came before
			 * cancel's */
			CHECK(returned && t_ret >= c.t_return);
			if (waited++ == 0)
				printf("  cancel-waited: cancel called %lld us after the callback "
				       "started, returned %lld us after it returned\n",
				       (long long)((t_call - c.t_start) / US),
				       (long long)((t_ret - c.t_return) / US));
		} else {
			CHECK_EQ(rc, TMO_CANCEL_FIRED);
			fired++;
			hold = hold < TMO_NSEC_PER_SEC ? 2 * hold : hold;
		}
	}
	if (fired)
		printf("  cancel-waited: %d cancels came after the callback returned (a slow "
		       "machine); held longer\n",
		       fired);
	CHECK_EQ(waited, 3);
	ct_destroy_engine(&e);
}

/* ---- re-arm from inside the callback, and a cancel racing that ----------- */

struct rearm_ctx {
	struct tmo_timer t;
	struct tmo *e;
	int limit; /* re-arm while fires < limit; 0: forever */
	int64_t timeout;
	atomic_llong fires, arms; /* arms: every successful arm, the first too */
	atomic_int in_cb;
	atomic_int arm_errors;
};

static void rearm_cb(struct tmo_timer *t, void *arg)
{
	struct rearm_ctx *c = arg;
	atomic_store(&c->in_cb, 1);
	long long f = atomic_fetch_add(&c->fires, 1) + 1;
	if (c->limit == 0 || f < c->limit) {
		if (tmo_arm(c->e, t, c->timeout, rearm_cb, c) == 0)
			atomic_fetch_add(&c->arms, 1);
		else
			atomic_fetch_add(&c->arm_errors, 1);
	}
	atomic_store(&c->in_cb, 0);
}

static void test_rearm_in_callback(void)
{
	struct rearm_ctx c;
	memset(&c, 0, sizeof c);
	c.e = ct_new_engine();
	if (!c.e)
		return;
	c.limit = 5;
	c.timeout = MS;
	CHECK_EQ(ct_arm(c.e, &c.t, MS, rearm_cb, &c), 0);
	CHECK(et_wait_ge(&c.fires, 5, LIVENESS));
	et_sleep_ns(20 * MS); /* a sixth fire, if the engine makes one, shows now */
	CHECK_EQ(atomic_load(&c.fires), 5);
	CHECK_EQ(atomic_load(&c.arm_errors), 0);
	CHECK_EQ(et_cancel_settled(c.e, &c.t), TMO_CANCEL_FIRED);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(c.e, &st), 0);
	CHECK_EQ(st.fired, 5);
	CHECK_EQ(st.pending, 0);
	ct_destroy_engine(&c.e);
}

static void test_cancel_races_rearm(void)
{
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	struct sk_rng rng;
	et_rng_seed(&rng, 9);
	int iters = (int)et_scaled(40, 8), prevented = 0;
	long long total_fires = 0;
	/* Every context lives until the engine is destroyed: an engine that
	 * keeps a timer armed past its cancel (the failure this case looks for)
	 * then fails the checks instead of crashing on freed memory. */
	struct rearm_ctx **ctxs = calloc((size_t)iters, sizeof *ctxs);
	for (int i = 0; i < iters; i++) {
		struct rearm_ctx *c = ctxs[i] = calloc(1, sizeof *c);
		c->e = e;
		c->limit = 0;
		/* 0: the callback re-arms as fast as the engine fires */
		c->timeout = i % 3 == 0 ? 0 : (int64_t)sk_below(&rng, 200 * US);
		CHECK_EQ(ct_arm(e, &c->t, c->timeout, rearm_cb, c), 0);
		atomic_fetch_add(&c->arms, 1);
		et_sleep_ns((int64_t)sk_below(&rng, 3 * MS));
		int rc = tmo_cancel(e, &c->t);
		/* The callback always re-arms, so once any running callback has
		 * returned there is a pending arm for this cancel to prevent. */
		CHECK_EQ(rc, TMO_CANCEL_PREVENTED);
		CHECK_EQ(atomic_load(&c->in_cb), 0);
		prevented += rc == TMO_CANCEL_PREVENTED;
		long long f = atomic_load(&c->fires);
		et_sleep_ns(2 * MS);
		CHECK_EQ(atomic_load(&c->fires), f); /* nothing after cancel returned */
		CHECK_EQ(atomic_load(&c->arm_errors), 0);
		/* exactly once: every arm ran, but the one this cancel prevented */
		CHECK_EQ(atomic_load(&c->arms), f + 1);
		rc = tmo_cancel(e, &c->t);
		CHECK_EQ(rc, TMO_ENOTARMED);
		total_fires += f;
	}
	printf("  cancel-vs-rearm: %d races, %d prevented, %lld callbacks ran\n", iters, prevented,
	       total_fires);
	ct_destroy_engine(&e);
	for (int i = 0; i < iters; i++)
		free(ctxs[i]);
	free(ctxs);
}

/* ---- independence: equal deadlines, cancel half -------------------------- */

/* One round on a fresh engine: N timers at one absolute deadline `margin`
 * from now (they share a heap level, a wheel slot, a kernel expiry instant),
 * the half marked in cancel[] cancelled.  A cancel that returned before the
 * deadline must have prevented (never early); one that returned later may
 * find its timer fired.  Every timer not prevented fires once, every
 * prevented one never: cancelling one never touches another.  Returns how
 * many cancels returned before the deadline; *wrong counts violations. */
static int independence_round(int64_t margin, const int *want_cancel, int *wrong)
{
	enum { N = 100 };
	struct et_counted *s = malloc(N * sizeof *s);
	et_counted_init(s, N, &cnt_total);
	int cancel[N];
	memcpy(cancel, want_cancel, sizeof cancel);
	struct tmo *e = ct_new_engine();
	if (!e) {
		free(s);
		return 0;
	}
	atomic_store(&cnt_total, 0);
	int64_t deadline = tmo_now_ns() + margin;
	for (int i = 0; i < N; i++) {
		int64_t timeout = deadline - tmo_now_ns();
		CHECK_EQ(ct_arm(e, &s[i].t, timeout < 0 ? 0 : timeout, et_counted_cb, &s[i]), 0);
	}
	int prevented = 0, in_time = 0, late = 0;
	for (int i = 0; i < N; i++) {
		if (!cancel[i])
			continue;
		int rc = tmo_cancel(e, &s[i].t);
		int64_t returned = tmo_now_ns();
		if (returned < deadline) {
			in_time++;
			if (rc != TMO_CANCEL_PREVENTED) {
				fprintf(stderr, "independence: timer %d: cancel %s, returned before the "
				        "deadline\n",
				        i, et_result_name(rc));
				++*wrong;
			}
		} else if (rc != TMO_CANCEL_PREVENTED) {
			late++;
			if (!ct_is_resolved(rc))
				++*wrong;
		}
		prevented += rc == TMO_CANCEL_PREVENTED;
		if (rc != TMO_CANCEL_PREVENTED)
			cancel[i] = 0; /* it fired: it counts among those that must */
	}
	/* LIVENESS past the deadline: a retried round's may lie seconds ahead */
	CHECK(et_wait_ge(&cnt_total, N - prevented, deadline - tmo_now_ns() + LIVENESS));
	et_sleep_ns(20 * MS); /* a prevented timer that fires anyway shows now */
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += atomic_load(&s[i].fires) != (cancel[i] ? 0 : 1);
	printf("  independence: %d equal deadlines %lld ms ahead, %d cancelled, %d fired, %d "
	       "wrong%s\n",
	       N, (long long)(margin / MS), prevented, (int)atomic_load(&cnt_total), bad,
	       late ? " (some cancels came after the deadline)" : "");
	*wrong += bad;
	ct_destroy_engine(&e);
	free(s);
	return in_time;
}

static void test_independence(void)
{
	enum { N = 100 };
	int cancel[N], idx[N];
	struct sk_rng rng;
	et_rng_seed(&rng, 10);
	for (int i = 0; i < N; i++)
		idx[i] = i;
	sk_shuffle(&rng, idx, N);
	for (int k = 0; k < N; k++)
		cancel[idx[k]] = k < N / 2;
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	/* Room to arm and cancel them all before the deadline: 80 ms plus twice
	 * the measured cost of N arm+cancel pairs (a thread per timer under a
	 * sanitizer takes milliseconds per arm). */
	int64_t margin = 80 * MS + 2 * N * pair_cost(e);
	ct_destroy_engine(&e);
	int wrong = 0, in_time = 0;
	for (int r = 0; r < ROUNDS && in_time < N / 4; r++, margin *= 2)
		in_time = independence_round(margin, cancel, &wrong);
	CHECK_EQ(wrong, 0);
	/* Not a check on the engine: that enough cancels came in time for the
	 * round to show anything. */
	if (in_time < N / 4)
		fprintf(stderr, "independence: in %d rounds, the last %lld ms ahead, fewer than %d "
		        "cancels returned before the deadline\n",
		        ROUNDS, (long long)(margin / 2 / MS), N / 4);
	CHECK(in_time >= N / 4);
}

int main(int argc, char **argv)
{
	ct_begin(argc, argv, "engine_contract_cancel");
	RUN(test_cancel_before_deadline);
	RUN(test_cancel_after_fire);
	RUN(test_cancel_self);
	RUN(test_cancel_waits_for_running);
	RUN(test_rearm_in_callback);
	RUN(test_cancel_races_rearm);
	RUN(test_independence);
	return ct_end();
}
