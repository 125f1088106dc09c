/*
 * The engine contract (include/tmo/tmo.h, "Guarantees"), how timers fire,
 * checked on one engine: `test_engine_contract ENGINE [CASE]`.  Exactly
 * once while several threads arm and cancel, never early, deadlines
 * further apart than the resolution in order, an arm with timeout 0 fires,
 * and the stats add up (the engine's threads named).  Cancelling:
 * contract_cancel.c; freeing timers and destroying the engine:
 * contract_lifetime.c; how every case is built: tests/kit/contract_test.h.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract_test.h"
#include "engine_test.h"

/* ---- exactly once, several threads arming and cancelling ----------------- */

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
	struct sk_rng rng;
	et_rng_seed(&rng, 100 + (uint64_t)w->id);
	int *order = calloc((size_t)w->slots, sizeof *order);
	for (int round = 0; round < w->rounds; round++) {
		for (int s = 0; s < w->slots; s++) {
			struct arm_rec *r = &w->recs[round * w->slots + s];
			switch (sk_below(&rng, 4)) {
			case 0: r->timeout = 0; break;
			case 1: r->timeout = (int64_t)sk_below(&rng, 500 * US); break;
			case 2: r->timeout = 500 * US + (int64_t)sk_below(&rng, 2500 * US); break;
			default: r->timeout = 50 * MS; break;
			}
			r->t_arm = tmo_now_ns();
			int rc = ct_arm(w->e, &w->timers[s], r->timeout, eo_cb, r);
			if (rc != 0) {
				fprintf(stderr, "worker %d: arm returned %s\n", w->id, tmo_errname(rc));
				w->arm_errors++;
				r->result = -100; /* not armed: must never fire */
			}
			order[s] = s;
		}
		sk_shuffle(&rng, order, w->slots);
		for (int k = 0; k < w->slots; k++) {
			int s = order[k];
			struct arm_rec *r = &w->recs[round * w->slots + s];
			if (sk_below(&rng, 3) == 0)
				et_sleep_ns((int64_t)sk_below(&rng, 400 * US));
			if (r->result == -100)
				continue;
			int rc = tmo_cancel(w->e, &w->timers[s]);
			r->result = rc;
			if (rc == TMO_CANCEL_PREVENTED) {
				w->prevented++;
			} else if (ct_is_resolved(rc)) {
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
	struct tmo *e = ct_new_engine();
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
	ct_destroy_engine(&e);
	for (int i = 0; i < nthreads; i++) {
		free(w[i].recs);
		free(w[i].timers);
	}
}

/* ---- never early --------------------------------------------------------- */

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
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	struct sk_rng rng;
	et_rng_seed(&rng, 2);
	atomic_store(&ne_count, 0);
	for (int i = 0; i < n; i++) {
		/* the listed values, then random ones with sub-tick offsets */
		s[i].timeout = i < nb ? base[i] : base[i % nb] + (int64_t)sk_below(&rng, 1000);
		s[i].t_arm = tmo_now_ns();
		CHECK_EQ(ct_arm(e, &s[i].t, s[i].timeout, ne_cb, &s[i]), 0);
	}
	CHECK(et_wait_ge(&ne_count, n, LIVENESS));
	int early = 0;
	int64_t worst = 0, max_late = 0;
	for (int i = 0; i < n; i++) {
		CHECK(ct_is_resolved(tmo_cancel(e, &s[i].t)));
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
	ct_destroy_engine(&e);
	free(s);
}

/* ---- order --------------------------------------------------------------- */

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
	struct sk_rng rng;
	et_rng_seed(&rng, 3);
	sk_shuffle(&rng, idx, N);
	struct tmo *e = ct_new_engine();
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
		CHECK_EQ(ct_arm(e, &s[i].t, timeout, ord_cb, &s[i]), 0);
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
		CHECK(ct_is_resolved(tmo_cancel(e, &s[i].t)));
	ct_destroy_engine(&e);
}

/* ---- timeout 0 ----------------------------------------------------------- */

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
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	int missing = 0;
	for (int i = 0; i < N; i++) {
		struct zero_ctx c;
		memset(&c, 0, sizeof c);
		int64_t t0 = tmo_now_ns();
		CHECK_EQ(ct_arm(e, &c.t, 0, zero_cb, &c), 0);
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
	ct_destroy_engine(&e);
}

/* ---- stats add up -------------------------------------------------------- */

/* The total of the counted timers (et_counted) of test_stats. */
static atomic_llong cnt_total;

static void test_stats(void)
{
	enum { LONG = 50, CANCEL = 20, SHORT = 10 };
	struct et_counted s[LONG + SHORT];
	et_counted_init(s, LONG + SHORT, &cnt_total);
	struct tmo *e = ct_new_engine();
	if (!e)
		return;
	atomic_store(&cnt_total, 0);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(st.fired, 0);
	CHECK_EQ(st.cancelled, 0);
	for (int i = 0; i < LONG; i++)
		CHECK_EQ(ct_arm(e, &s[i].t, 10 * TMO_NSEC_PER_SEC, et_counted_cb, &s[i]), 0);
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
		CHECK_EQ(ct_arm(e, &s[i].t, MS, et_counted_cb, &s[i]), 0);
	CHECK(et_wait_ge(&cnt_total, SHORT, LIVENESS));
	for (int i = LONG; i < LONG + SHORT; i++)
		CHECK(ct_is_resolved(tmo_cancel(e, &s[i].t)));
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
	ct_destroy_engine(&e);
	CHECK(ET_WAIT_UNTIL((named = et_engine_threads()) == 0, LIVENESS));
	CHECK_EQ(named, 0);
}

int main(int argc, char **argv)
{
	ct_begin(argc, argv, "engine_contract");
	RUN(test_exactly_once_concurrent);
	RUN(test_never_early);
	RUN(test_order);
	RUN(test_timeout_zero);
	RUN(test_stats);
	return ct_end();
}
