/*
 * The engine contract (include/tmo/tmo.h, "Guarantees" and the cancel
 * Return: list), checked on one engine: `test_engine_contract ENGINE`.
 *
 * Every case creates its own engine, counts what it sees, and reports each
 * violation through CHECK (the exit status is non-zero if any check failed).
 * Every wait is bounded, so a lost timer fails the case instead of hanging.
 * Engines with THREAD_PER_TIMER get smaller sizes (an arm starts a thread),
 * never weaker checks.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC
#define US TMO_NSEC_PER_USEC
/* Upper bound for "a due timer has fired" on 2 noisy cores: a liveness
 * bound, not a lateness measurement. */
#define LIVENESS (3 * TMO_NSEC_PER_SEC)

static struct tmo *new_engine(void)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(et_ops, NULL, &e);
	CHECK_EQ(rc, 0);
	CHECK(e != NULL);
	return e;
}

static void destroy_engine(struct tmo **e)
{
	CHECK_EQ(tmo_destroy(e), 0);
	CHECK(*e == NULL);
}

static int is_resolved(int rc)
{
	return rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED;
}

/* The measured cost of an arm+cancel pair (the worst of 3): deadlines that
 * must leave room to arm and cancel many timers first are sized from it. */
/* tmo_arm, asked again while the engine refuses for capacity (TMO_EAGAIN:
 * mpsc's flow control, while its timer thread, starved on a loaded machine,
 * has not taken back the nodes in transit), as an application would.  A
 * refusal that outlasts LIVENESS is the engine's failure to recover: it is
 * returned, and fails the check.  Callbacks arm with tmo_arm itself (a wait
 * there would hold up the very thread that recycles). */
static atomic_llong eagain_retries;

static int arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
               void *arg)
{
	int rc = tmo_arm(e, t, timeout_ns, cb, arg);
	int64_t end = rc == TMO_EAGAIN ? tmo_now_ns() + LIVENESS : 0;
	while (rc == TMO_EAGAIN && tmo_now_ns() < end) {
		atomic_fetch_add(&eagain_retries, 1);
		et_sleep_ns(100 * US);
		rc = tmo_arm(e, t, timeout_ns, cb, arg);
	}
	return rc;
}

static void probe_cb(struct tmo_timer *t, void *arg) { (void)t, (void)arg; }

static int64_t pair_cost(struct tmo *e)
{
	int64_t worst = 0;
	for (int k = 0; k < 3; k++) {
		struct tmo_timer probe = TMO_TIMER_INIT;
		int64_t t0 = tmo_now_ns();
		CHECK_EQ(arm(e, &probe, TMO_NSEC_PER_SEC, probe_cb, NULL), 0);
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

/* ---- 1. exactly once, several threads arming and cancelling ------------- */

/* One record per arm: the callback counts into the record of the arm it
 * belongs to, so a stale fire of an earlier arm cannot hide as a fire of the
 * current one. */
struct arm_rec {
	int64_t t_arm;   /* clock read just before tmo_arm() */
	int64_t timeout;
	atomic_int fires;
	int result; /* what the cancel returned */
};

static atomic_llong eo_early, eo_fires;

static void eo_cb(struct tmo_timer *t, void *arg)
{
	struct arm_rec *r = arg;
	int64_t now = tmo_now_ns();
	if (now < r->t_arm + r->timeout)
		atomic_fetch_add(&eo_early, 1);
	atomic_fetch_add(&r->fires, 1);
	atomic_fetch_add(&eo_fires, 1);
}

struct eo_worker {
	pthread_t th;
	struct tmo *e;
	int id, rounds, slots;
	struct arm_rec *recs; /* rounds * slots */
	struct tmo_timer *timers;
	long arm_errors, bad_results, fired_not_counted;
	long prevented, fired, waited;
};

static void *eo_run(void *arg)
{
	struct eo_worker *w = arg;
	struct et_rng rng;
	et_rng_seed(&rng, 100 + (uint64_t)w->id);
	int *order = calloc((size_t)w->slots, sizeof *order);
	for (int round = 0; round < w->rounds; round++) {
		for (int s = 0; s < w->slots; s++) {
			struct arm_rec *r = &w->recs[round * w->slots + s];
			switch (et_below(&rng, 4)) {
			case 0: r->timeout = 0; break;
			case 1: r->timeout = (int64_t)et_below(&rng, 500 * US); break;
			case 2: r->timeout = 500 * US + (int64_t)et_below(&rng, 2500 * US); break;
			default: r->timeout = 50 * MS; break;
			}
			r->t_arm = tmo_now_ns();
			int rc = arm(w->e, &w->timers[s], r->timeout, eo_cb, r);
			if (rc != 0) {
				fprintf(stderr, "worker %d: arm returned %s\n", w->id, tmo_errname(rc));
				w->arm_errors++;
				r->result = -100; /* not armed: must never fire */
			}
			order[s] = s;
		}
		et_shuffle(&rng, order, w->slots);
		for (int k = 0; k < w->slots; k++) {
			int s = order[k];
			struct arm_rec *r = &w->recs[round * w->slots + s];
			if (et_below(&rng, 3) == 0)
				et_sleep_ns((int64_t)et_below(&rng, 400 * US));
			if (r->result == -100)
				continue;
			int rc = tmo_cancel(w->e, &w->timers[s]);
			r->result = rc;
			if (rc == TMO_CANCEL_PREVENTED) {
				w->prevented++;
			} else if (is_resolved(rc)) {
				rc == TMO_CANCEL_FIRED ? w->fired++ : w->waited++;
				/* FIRED/WAITED: the callback ran and returned before
				 * cancel returned, so its count is visible now. */
				if (atomic_load(&r->fires) != 1)
					w->fired_not_counted++;
			} else {
				fprintf(stderr, "worker %d: cancel returned %s\n", w->id,
				        et_result_name(rc));
				w->bad_results++;
			}
		}
	}
	free(order);
	return NULL;
}

static void test_exactly_once_concurrent(void)
{
	const int nthreads = 3;
	int slots = et_thread_per_timer() ? 24 : 64;
	int rounds = (int)et_scaled(et_thread_per_timer() ? 20 : 40, 4);
	struct tmo *e = new_engine();
	if (!e)
		return;
	atomic_store(&eo_early, 0);
	atomic_store(&eo_fires, 0);
	struct eo_worker w[4];
	memset(w, 0, sizeof w);
	for (int i = 0; i < nthreads; i++) {
		w[i].e = e;
		w[i].id = i;
		w[i].rounds = rounds;
		w[i].slots = slots;
		w[i].recs = calloc((size_t)(rounds * slots), sizeof *w[i].recs);
		w[i].timers = calloc((size_t)slots, sizeof *w[i].timers);
		CHECK(pthread_create(&w[i].th, NULL, eo_run, &w[i]) == 0);
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(w[i].th, NULL);
	/* Give a wrongly prevented timer the time to fire anyway. */
	et_sleep_ns(60 * MS);
	long armed = 0, prevented = 0, fires = 0, waited = 0, fired = 0, violations = 0;
	for (int i = 0; i < nthreads; i++) {
		CHECK_EQ(w[i].arm_errors, 0);
		CHECK_EQ(w[i].bad_results, 0);
		CHECK_EQ(w[i].fired_not_counted, 0);
		for (int k = 0; k < rounds * slots; k++) {
			struct arm_rec *r = &w[i].recs[k];
			int f = atomic_load(&r->fires);
			if (r->result == -100) {
				violations += f != 0;
				continue;
			}
			armed++;
			fires += f;
			prevented += r->result == TMO_CANCEL_PREVENTED;
			/* exactly once: fired once, or prevented and never fired */
			if (f + (r->result == TMO_CANCEL_PREVENTED) != 1) {
				if (violations < 5)
					fprintf(stderr, "arm %d/%d: fires %d, cancel %s\n", i, k, f,
					        et_result_name(r->result));
				violations++;
			}
		}
		waited += w[i].waited;
		fired += w[i].fired;
	}
	printf("  exactly-once: %d threads, %ld arms: %ld fired (cancel said FIRED %ld, WAITED "
	       "%ld), %ld prevented, %ld violations, %lld early\n",
	       nthreads, armed, fires, fired, waited, prevented, violations,
	       (long long)atomic_load(&eo_early));
	CHECK_EQ(violations, 0);
	CHECK_EQ(armed, fires + prevented);
	CHECK_EQ(atomic_load(&eo_early), 0);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(st.fired, fires);
	CHECK_EQ(st.cancelled, prevented);
	destroy_engine(&e);
	for (int i = 0; i < nthreads; i++) {
		free(w[i].recs);
		free(w[i].timers);
	}
}

/* ---- 2. never early ------------------------------------------------------ */

struct ne_slot {
	struct tmo_timer t;
	int64_t t_arm, timeout, t_fire;
	atomic_int fires;
};
static atomic_llong ne_count;

static void ne_cb(struct tmo_timer *t, void *arg)
{
	struct ne_slot *s = arg;
	s->t_fire = tmo_now_ns();
	atomic_fetch_add(&s->fires, 1);
	atomic_fetch_add(&ne_count, 1);
}

static void test_never_early(void)
{
	static const int64_t base[] = {0,       1,       999,      US,      10 * US, 50 * US,
	                               100 * US, 250 * US, 999 * US, MS,      MS + 1, 1500 * US,
	                               2 * MS,  3 * MS,  5 * MS,   7 * MS,  10 * MS, 20 * MS};
	const int nb = (int)(sizeof base / sizeof base[0]);
	int n = et_thread_per_timer() ? 3 * nb : 8 * nb;
	struct ne_slot *s = calloc((size_t)n, sizeof *s);
	struct tmo *e = new_engine();
	if (!e)
		return;
	struct et_rng rng;
	et_rng_seed(&rng, 2);
	atomic_store(&ne_count, 0);
	for (int i = 0; i < n; i++) {
		/* the listed values, then random ones with sub-tick offsets */
		s[i].timeout = i < nb ? base[i] : base[i % nb] + (int64_t)et_below(&rng, 1000);
		s[i].t_arm = tmo_now_ns();
		CHECK_EQ(arm(e, &s[i].t, s[i].timeout, ne_cb, &s[i]), 0);
	}
	CHECK(et_wait_ge(&ne_count, n, LIVENESS));
	int early = 0;
	int64_t worst = 0, max_late = 0;
	for (int i = 0; i < n; i++) {
		CHECK(is_resolved(tmo_cancel(e, &s[i].t)));
		CHECK_EQ(atomic_load(&s[i].fires), 1);
		int64_t d = s[i].t_fire - (s[i].t_arm + s[i].timeout);
		if (d < 0) {
			early++;
			if (d < worst)
				worst = d;
		} else if (d > max_late) {
			max_late = d;
		}
	}
	printf("  never-early: %d timers, %d early (worst %lld ns), max lateness %lld us\n", n,
	       early, (long long)worst, (long long)(max_late / US));
	CHECK_EQ(early, 0);
	destroy_engine(&e);
	free(s);
}

/* ---- 3. order ------------------------------------------------------------ */

struct ord_slot {
	struct tmo_timer t;
	int64_t lo, hi; /* bounds of the engine's deadline: [before, after] arm */
	int seq;
	atomic_int fires;
};
static atomic_int ord_seq;
static atomic_llong ord_count;

static void ord_cb(struct tmo_timer *t, void *arg)
{
	struct ord_slot *s = arg;
	s->seq = atomic_fetch_add(&ord_seq, 1);
	atomic_fetch_add(&s->fires, 1);
	atomic_fetch_add(&ord_count, 1);
}

static void test_order(void)
{
	enum { N = 16 };
	int64_t res = et_ops->resolution_ns;
	/* Deadlines must be further apart than the resolution; 1 ms more keeps
	 * the pairs we compare clear of scheduler noise on a thread per timer. */
	int64_t gap = res + MS;
	struct ord_slot s[N];
	memset(s, 0, sizeof s);
	int idx[N];
	for (int i = 0; i < N; i++)
		idx[i] = i;
	struct et_rng rng;
	et_rng_seed(&rng, 3);
	et_shuffle(&rng, idx, N);
	struct tmo *e = new_engine();
	if (!e)
		return;
	atomic_store(&ord_seq, 0);
	atomic_store(&ord_count, 0);
	int64_t start = tmo_now_ns() + 10 * MS;
	for (int k = 0; k < N; k++) {
		int i = idx[k]; /* armed in shuffled order, deadline by index */
		int64_t before = tmo_now_ns();
		int64_t timeout = start + i * gap - before;
		if (timeout < 0)
			timeout = 0;
		CHECK_EQ(arm(e, &s[i].t, timeout, ord_cb, &s[i]), 0);
		s[i].lo = before + timeout;
		s[i].hi = tmo_now_ns() + timeout;
	}
	CHECK(et_wait_ge(&ord_count, N, LIVENESS));
	int pairs = 0, inversions = 0;
	for (int i = 0; i < N; i++) {
		CHECK_EQ(atomic_load(&s[i].fires), 1);
		for (int j = 0; j < N; j++) {
			/* Only pairs whose deadlines are certainly more than the
			 * resolution apart (arm latency included) are ordered. */
			if (s[j].lo - s[i].hi <= res)
				continue;
			pairs++;
			if (s[i].seq > s[j].seq) {
				inversions++;
				fprintf(stderr, "order: deadline %d fired after %d\n", i, j);
			}
		}
	}
	printf("  order: %d timers %lld us apart, %d ordered pairs, %d inversions\n", N,
	       (long long)(gap / US), pairs, inversions);
	CHECK(pairs >= N - 1);
	CHECK_EQ(inversions, 0);
	for (int i = 0; i < N; i++)
		CHECK(is_resolved(tmo_cancel(e, &s[i].t)));
	destroy_engine(&e);
}

/* ---- 4-6. cancel before the deadline, after the fire, from inside -------- */

/* The total of the counted timers (et_counted) of cases 4, 5, 10 and 15. */
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
	struct tmo *e = new_engine();
	if (!e)
		return 0;
	atomic_store(&cnt_total, 0);
	for (int i = 0; i < N; i++) {
		int64_t timeout = margin + i * 200 * US;
		deadline[i] = tmo_now_ns() + timeout; /* no later than the engine's */
		CHECK_EQ(arm(e, &s[i].t, timeout, et_counted_cb, &s[i]), 0);
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
		} else if (rc != TMO_CANCEL_PREVENTED && !is_resolved(rc)) {
			++*wrong;
		}
		prevented += rc == TMO_CANCEL_PREVENTED;
	}
	/* Only what was not prevented fires: wait for it, then a little more
	 * for a prevented timer that fires anyway. */
	CHECK(et_wait_ge(&cnt_total, N - prevented, LIVENESS));
	et_sleep_ns(deadline[N - 1] - tmo_now_ns() + 20 * MS);
	CHECK_EQ(atomic_load(&cnt_total), N - prevented);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.cancelled, prevented);
	CHECK_EQ(st.fired, N - prevented);
	CHECK_EQ(st.pending, 0);
	destroy_engine(&e);
	if (in_time < N)
		printf("  cancel-before: %d of %d cancels returned after their deadline (a slow "
		       "machine)\n",
		       N - in_time, N);
	return in_time;
}

static void test_cancel_before_deadline(void)
{
	struct tmo *e = new_engine();
	if (!e)
		return;
	/* room to arm them all before the first deadline: 100 ms plus twice the
	 * measured cost of 50 arm+cancel pairs */
	int64_t margin = 100 * MS + 2 * 50 * pair_cost(e);
	destroy_engine(&e);
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
	struct tmo *e = new_engine();
	if (!e)
		return;
	atomic_store(&cnt_total, 0);
	for (int round = 1; round <= 3; round++) {
		/* the same timer again after each resolution */
		CHECK_EQ(arm(e, &s.t, MS, et_counted_cb, &s), 0);
		CHECK(et_wait_ge(&cnt_total, round, LIVENESS));
		CHECK_EQ(et_cancel_settled(e, &s.t), TMO_CANCEL_FIRED);
		CHECK_EQ(atomic_load(&s.fires), round);
	}
	destroy_engine(&e);
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
	c.e = new_engine();
	if (!c.e)
		return;
	CHECK_EQ(arm(c.e, &c.t, 0, self_cb, &c), 0);
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
	CHECK_EQ(arm(c.e, &c.t, 0, self_cb, &c), 0);
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
	destroy_engine(&c.e);
}

/* ---- 7. cancel waits for a callback running on the engine thread --------- */

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
	struct tmo *e = new_engine();
	if (!e)
		return;
	int waited = 0, fired = 0;
	int64_t hold = 40 * MS;
	for (int i = 0; i < 12 && waited < 3; i++) {
		struct wait_ctx c;
		memset(&c, 0, sizeof c);
		c.hold = hold;
		CHECK_EQ(arm(e, &c.t, (i % 3) * MS, wait_cb, &c), 0);
		CHECK(et_wait_ge(&c.started, 1, LIVENESS));
		int64_t t_call = tmo_now_ns();
		int rc = tmo_cancel(e, &c.t);
		int64_t t_ret = tmo_now_ns();
		int returned = atomic_load(&c.returned);
		/* never returns while the callback runs */
		CHECK_EQ(returned, 1);
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
	destroy_engine(&e);
}

/* ---- 8-9. re-arm from inside the callback, and a cancel racing that ------ */

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
	c.e = new_engine();
	if (!c.e)
		return;
	c.limit = 5;
	c.timeout = MS;
	CHECK_EQ(arm(c.e, &c.t, MS, rearm_cb, &c), 0);
	CHECK(et_wait_ge(&c.fires, 5, LIVENESS));
	et_sleep_ns(20 * MS); /* a sixth fire, if the engine makes one, shows now */
	CHECK_EQ(atomic_load(&c.fires), 5);
	CHECK_EQ(atomic_load(&c.arm_errors), 0);
	CHECK_EQ(et_cancel_settled(c.e, &c.t), TMO_CANCEL_FIRED);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(c.e, &st), 0);
	CHECK_EQ(st.fired, 5);
	CHECK_EQ(st.pending, 0);
	destroy_engine(&c.e);
}

static void test_cancel_races_rearm(void)
{
	struct tmo *e = new_engine();
	if (!e)
		return;
	struct et_rng rng;
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
		c->timeout = i % 3 == 0 ? 0 : (int64_t)et_below(&rng, 200 * US);
		CHECK_EQ(arm(e, &c->t, c->timeout, rearm_cb, c), 0);
		atomic_fetch_add(&c->arms, 1);
		et_sleep_ns((int64_t)et_below(&rng, 3 * MS));
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
	destroy_engine(&e);
	for (int i = 0; i < iters; i++)
		free(ctxs[i]);
	free(ctxs);
}

/* ---- 10. independence: equal deadlines, cancel half ---------------------- */

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
	struct tmo *e = new_engine();
	if (!e) {
		free(s);
		return 0;
	}
	atomic_store(&cnt_total, 0);
	int64_t deadline = tmo_now_ns() + margin;
	for (int i = 0; i < N; i++) {
		int64_t timeout = deadline - tmo_now_ns();
		CHECK_EQ(arm(e, &s[i].t, timeout < 0 ? 0 : timeout, et_counted_cb, &s[i]), 0);
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
			if (!is_resolved(rc))
				++*wrong;
		}
		prevented += rc == TMO_CANCEL_PREVENTED;
		if (rc != TMO_CANCEL_PREVENTED)
			cancel[i] = 0; /* it fired: it counts among those that must */
	}
	CHECK(et_wait_ge(&cnt_total, N - prevented, LIVENESS));
	et_sleep_ns(20 * MS); /* a prevented timer that fires anyway shows now */
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += atomic_load(&s[i].fires) != (cancel[i] ? 0 : 1);
	printf("  independence: %d equal deadlines %lld ms ahead, %d cancelled, %d fired, %d "
	       "wrong%s\n",
	       N, (long long)(margin / MS), prevented, (int)atomic_load(&cnt_total), bad,
	       late ? " (some cancels came after the deadline)" : "");
	*wrong += bad;
	destroy_engine(&e);
	free(s);
	return in_time;
}

static void test_independence(void)
{
	enum { N = 100 };
	int cancel[N], idx[N];
	struct et_rng rng;
	et_rng_seed(&rng, 10);
	for (int i = 0; i < N; i++)
		idx[i] = i;
	et_shuffle(&rng, idx, N);
	for (int k = 0; k < N; k++)
		cancel[idx[k]] = k < N / 2;
	struct tmo *e = new_engine();
	if (!e)
		return;
	/* Room to arm and cancel them all before the deadline: 80 ms plus twice
	 * the measured cost of N arm+cancel pairs (a thread per timer under a
	 * sanitizer takes milliseconds per arm). */
	int64_t margin = 80 * MS + 2 * N * pair_cost(e);
	destroy_engine(&e);
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

/* ---- 11-12. freeing timers: right after cancel, and inside the callback -- */

/* Heap-allocated, so AddressSanitizer reports any engine access after the
 * caller was allowed to free it. */
struct heap_rec {
	struct tmo_timer t;
	int id;
	int payload;
};
static atomic_int *hr_fires;
static atomic_llong hr_total;
static atomic_int hr_bad_arg;

static void hr_cb(struct tmo_timer *t, void *arg)
{
	struct heap_rec *r = tmo_container_of(t, struct heap_rec, t);
	if (arg != r)
		atomic_fetch_add(&hr_bad_arg, 1);
	r->payload++;
	atomic_fetch_add(&hr_fires[r->id], 1);
	atomic_fetch_add(&hr_total, 1);
}

static void hr_free_cb(struct tmo_timer *t, void *arg)
{
	struct heap_rec *r = tmo_container_of(t, struct heap_rec, t);
	atomic_fetch_add(&hr_fires[r->id], 1);
	atomic_fetch_add(&hr_total, 1);
	memset(r, 0xdb, sizeof *r);
	free(r);
}

static void test_free_after_cancel(void)
{
	int n = (int)et_scaled(et_thread_per_timer() ? 300 : 1000, 50);
	hr_fires = calloc((size_t)n, sizeof *hr_fires);
	char *prevented = calloc((size_t)n, 1);
	struct tmo *e = new_engine();
	if (!e)
		return;
	struct et_rng rng;
	et_rng_seed(&rng, 11);
	atomic_store(&hr_total, 0);
	int bad = 0;
	for (int i = 0; i < n; i++) {
		struct heap_rec *r = malloc(sizeof *r);
		tmo_timer_init(&r->t);
		r->id = i;
		r->payload = 0;
		static const int64_t choice[] = {0, 20 * US, 300 * US, 100 * MS};
		CHECK_EQ(arm(e, &r->t, choice[et_below(&rng, 4)], hr_cb, r), 0);
		if (et_below(&rng, 4) == 0)
			et_sleep_ns((int64_t)et_below(&rng, 500 * US));
		int rc = tmo_cancel(e, &r->t);
		if (rc == TMO_CANCEL_PREVENTED)
			prevented[i] = 1;
		else if (!is_resolved(rc))
			bad++;
		memset(r, 0xa5, sizeof *r);
		free(r);
	}
	et_sleep_ns(120 * MS);
	int wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += atomic_load(&hr_fires[i]) + prevented[i] != 1;
	printf("  free-after-cancel: %d timers freed on cancel's return, %lld fired, %d wrong\n",
	       n, (long long)atomic_load(&hr_total), wrong);
	CHECK_EQ(bad, 0);
	CHECK_EQ(wrong, 0);
	CHECK_EQ(atomic_load(&hr_bad_arg), 0);
	destroy_engine(&e);
	free(hr_fires);
	free(prevented);
}

static void test_callback_frees_timer(void)
{
	int n = (int)et_scaled(et_thread_per_timer() ? 200 : 1000, 50);
	hr_fires = calloc((size_t)n, sizeof *hr_fires);
	struct tmo *e = new_engine();
	if (!e)
		return;
	struct et_rng rng;
	et_rng_seed(&rng, 12);
	atomic_store(&hr_total, 0);
	for (int i = 0; i < n; i++) {
		struct heap_rec *r = malloc(sizeof *r);
		tmo_timer_init(&r->t);
		r->id = i;
		CHECK_EQ(arm(e, &r->t, (int64_t)et_below(&rng, 2 * MS), hr_free_cb, r), 0);
	}
	CHECK(et_wait_ge(&hr_total, n, LIVENESS));
	et_sleep_ns(10 * MS);
	int wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += atomic_load(&hr_fires[i]) != 1;
	printf("  callback-frees-timer: %d timers, %d wrong\n", n, wrong);
	CHECK_EQ(wrong, 0);
	destroy_engine(&e);
	free(hr_fires);
}

/* ---- 13. destroy with pending timers ------------------------------------- */

static atomic_int dp_destroyed, dp_late, dp_inflight, dp_slow_started, dp_slow_returned;
static atomic_llong dp_fires, dp_long_fires;
#define DP_LONG ((void *)1) /* arg of a timer due in 1 s or more */

static void dp_cb(struct tmo_timer *t, void *arg)
{
	atomic_fetch_add(&dp_inflight, 1);
	if (atomic_load(&dp_destroyed))
		atomic_fetch_add(&dp_late, 1);
	if (arg == DP_LONG)
		atomic_fetch_add(&dp_long_fires, 1); /* destroy must cancel, not fire */
	atomic_fetch_add(&dp_fires, 1);
	atomic_fetch_sub(&dp_inflight, 1);
}

static void dp_slow_cb(struct tmo_timer *t, void *arg)
{
	atomic_fetch_add(&dp_inflight, 1);
	atomic_store(&dp_slow_started, 1);
	et_sleep_ns(30 * MS);
	atomic_store(&dp_slow_returned, 1);
	atomic_fetch_sub(&dp_inflight, 1);
}

static void test_destroy_pending(void)
{
	int n = (int)et_scaled(et_thread_per_timer() ? 200 : 2000, 50);
	struct tmo_timer *t = calloc((size_t)n + 1, sizeof *t);
	int64_t live0 = tmo_testing_live_allocs();
	int threads0 = et_thread_count();
	atomic_store(&dp_destroyed, 0);
	atomic_store(&dp_late, 0);
	atomic_store(&dp_fires, 0);
	atomic_store(&dp_long_fires, 0);
	atomic_store(&dp_slow_started, 0);
	atomic_store(&dp_slow_returned, 0);
	struct tmo *e = new_engine();
	if (!e)
		return;
	struct et_rng rng;
	et_rng_seed(&rng, 13);
	/* a callback that is running when destroy is called */
	CHECK_EQ(arm(e, &t[n], 0, dp_slow_cb, NULL), 0);
	for (int i = 0; i < n; i++) {
		/* a tenth may fire before destroy, the rest are pending */
		int64_t to = i % 10 == 0 ? (int64_t)et_below(&rng, 2 * MS)
		                         : TMO_NSEC_PER_SEC + (int64_t)et_below(&rng, 10 * TMO_NSEC_PER_SEC);
		CHECK_EQ(arm(e, &t[i], to, dp_cb, i % 10 == 0 ? NULL : DP_LONG), 0);
	}
	CHECK(ET_WAIT_UNTIL(atomic_load(&dp_slow_started), LIVENESS));
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	long long fired_before = atomic_load(&dp_fires);
	int64_t t0 = tmo_now_ns();
	destroy_engine(&e);
	int64_t dt = tmo_now_ns() - t0;
	atomic_store(&dp_destroyed, 1);
	int inflight = atomic_load(&dp_inflight);
	int slow_done = atomic_load(&dp_slow_returned);
	et_sleep_ns(50 * MS);
	int threads1 = et_wait_thread_count(threads0, LIVENESS);
	printf("  destroy-pending: %llu pending destroyed in %lld us, %lld fired before, %lld "
	       "long ones fired; late %d, in flight at return %d, threads %d -> %d, live allocs "
	       "%lld -> %lld\n",
	       (unsigned long long)st.pending, (long long)(dt / US), fired_before,
	       (long long)atomic_load(&dp_long_fires), atomic_load(&dp_late), inflight, threads0,
	       threads1, (long long)live0, (long long)tmo_testing_live_allocs());
	CHECK_EQ(atomic_load(&dp_late), 0);
	CHECK_EQ(atomic_load(&dp_long_fires), 0);
	CHECK_EQ(inflight, 0);
	CHECK_EQ(slow_done, 1);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
	CHECK_EQ(threads1, threads0);
	free(t);
}

/* ---- 14. timeout 0 ------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

struct zero_ctx {
	struct tmo_timer t;
	atomic_llong fired_at;
};

static void zero_cb(struct tmo_timer *t, void *arg)
{
	struct zero_ctx *c = arg;
	atomic_store(&c->fired_at, tmo_now_ns());
}

static void test_timeout_zero(void)
{
	enum { N = 50 };
	int64_t lat[N];
	struct tmo *e = new_engine();
	if (!e)
		return;
	int missing = 0;
	for (int i = 0; i < N; i++) {
		struct zero_ctx c;
		memset(&c, 0, sizeof c);
		int64_t t0 = tmo_now_ns();
		CHECK_EQ(arm(e, &c.t, 0, zero_cb, &c), 0);
		if (!et_wait_ge(&c.fired_at, 1, LIVENESS)) {
			missing++;
			lat[i] = LIVENESS;
		} else {
			lat[i] = atomic_load(&c.fired_at) - t0;
		}
		CHECK(tmo_cancel(e, &c.t) >= 0);
	}
	qsort(lat, N, sizeof lat[0], cmp_i64);
	printf("  timeout-0: %d arms, fire latency p50 %lld us, max %lld us, %d missing\n", N,
	       (long long)(lat[N / 2] / US), (long long)(lat[N - 1] / US), missing);
	CHECK_EQ(missing, 0);
	destroy_engine(&e);
}

/* ---- 15. stats add up ------------------------------------------------------ */

static void test_stats(void)
{
	enum { LONG = 50, CANCEL = 20, SHORT = 10 };
	struct et_counted s[LONG + SHORT];
	et_counted_init(s, LONG + SHORT, &cnt_total);
	struct tmo *e = new_engine();
	if (!e)
		return;
	atomic_store(&cnt_total, 0);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(st.fired, 0);
	CHECK_EQ(st.cancelled, 0);
	for (int i = 0; i < LONG; i++)
		CHECK_EQ(arm(e, &s[i].t, 10 * TMO_NSEC_PER_SEC, et_counted_cb, &s[i]), 0);
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, LONG);
	CHECK(st.threads >= 1);
	/* Each of them named "tmo-<engine>" once it has started (tmo.h, Threads). */
	int named = -1;
	CHECK(ET_WAIT_UNTIL((named = et_engine_threads()) == (int)st.threads, LIVENESS));
	CHECK_EQ(named, (int)st.threads);
	for (int i = 0; i < CANCEL; i++)
		CHECK_EQ(tmo_cancel(e, &s[i].t), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, LONG - CANCEL);
	CHECK_EQ(st.cancelled, CANCEL);
	for (int i = LONG; i < LONG + SHORT; i++)
		CHECK_EQ(arm(e, &s[i].t, MS, et_counted_cb, &s[i]), 0);
	CHECK(et_wait_ge(&cnt_total, SHORT, LIVENESS));
	for (int i = LONG; i < LONG + SHORT; i++)
		CHECK(is_resolved(tmo_cancel(e, &s[i].t)));
	CHECK_EQ(tmo_stats(e, &st), 0);
	printf("  stats: pending %llu fired %llu cancelled %llu threads %llu held_nodes %llu "
	       "held_bytes %llu\n",
	       (unsigned long long)st.pending, (unsigned long long)st.fired,
	       (unsigned long long)st.cancelled, (unsigned long long)st.threads,
	       (unsigned long long)st.held_nodes, (unsigned long long)st.held_bytes);
	CHECK_EQ(st.pending, LONG - CANCEL);
	CHECK_EQ(st.fired, SHORT);
	CHECK_EQ(st.cancelled, CANCEL);
	/* armed == fired + cancelled + pending */
	CHECK_EQ(LONG + SHORT, st.fired + st.cancelled + st.pending);
	destroy_engine(&e);
	CHECK(ET_WAIT_UNTIL((named = et_engine_threads()) == 0, LIVENESS));
	CHECK_EQ(named, 0);
}

/* argv[2], when given, runs only the cases whose names contain it. */
static const char *only;
#define CASE(fn)                                     \
	do {                                             \
		if (only == NULL || strstr(#fn, only) != NULL) \
			RUN(fn);                                 \
	} while (0)

int main(int argc, char **argv)
{
	et_init(argc, argv, "engine_contract");
	only = argc > 2 ? argv[2] : NULL;
	CASE(test_exactly_once_concurrent);
	CASE(test_never_early);
	CASE(test_order);
	CASE(test_cancel_before_deadline);
	CASE(test_cancel_after_fire);
	CASE(test_cancel_self);
	CASE(test_cancel_waits_for_running);
	CASE(test_rearm_in_callback);
	CASE(test_cancel_races_rearm);
	CASE(test_independence);
	CASE(test_free_after_cancel);
	CASE(test_callback_frees_timer);
	CASE(test_destroy_pending);
	CASE(test_timeout_zero);
	CASE(test_stats);
	if (atomic_load(&eagain_retries))
		printf("note: arms refused with TMO_EAGAIN (the engine's flow control) were asked "
		       "again %lld times\n",
		       (long long)atomic_load(&eagain_retries));
	return TEST_EXIT();
}
