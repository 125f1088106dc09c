/*
 * mpsc's structure, the near/far heap over a wheel (src/lf/schedule.c),
 * against a model, on a virtual clock, driven as the timer thread drives
 * it: insert and remove at random, then collect while next_deadline says
 * something is due.  Checked after every step:
 *   - a collect hands out only nodes due at its `now`, each one due no
 *     later than anything still filed (exact deadline order, across the
 *     heap and the wheel);
 *   - next_deadline is a lower bound on every filed deadline, and the
 *     exact earliest one after a collect that had room to settle (the
 *     timer thread sleeps until a deadline, not a tick before it);
 *   - contains, deadline and count agree with the model; a node's aux
 *     keeps its LF_IN_TT;
 *   - with allocation refused (the heap cannot grow), nothing is lost:
 *     what could not move waits in the wheel and comes out later.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "engine_test.h" /* sk_rng */
#include "lf/node.h"
#include "lf/schedule.h"
#include "tmo/testing.h"

#define N 4096
#define MS TMO_NSEC_PER_MSEC
#define ORIGIN ((int64_t)1000 * MS)

static struct lf_node nodes[N];
static int live[N];
static int64_t dl[N];
static const struct lf_sched *sc = &tmo__lf_sched_near_far;
static _Alignas(64) unsigned char state[1 << 16];
static struct sk_rng rng;

static int64_t min_live(void)
{
	int64_t m = INT64_MAX;
	for (int i = 0; i < N; i++)
		if (live[i] && dl[i] < m)
			m = dl[i];
	return m;
}

static uint64_t count_live(void)
{
	uint64_t c = 0;
	for (int i = 0; i < N; i++)
		c += (uint64_t)live[i];
	return c;
}

/* Every node out, as the arena hands them (never filed: contains 0). */
static void reset(void)
{
	memset(live, 0, sizeof live);
	for (int i = 0; i < N; i++) {
		atomic_store(&nodes[i].aux, 0);
		tmo__heap_node_init(&nodes[i].s.heap);
	}
}

static int fail_alloc(enum tmo_fault_kind kind, void *ctx)
{
	(void)ctx;
	return kind == TMO_FAULT_ALLOC;
}

/* One collect's hand-out: in order, due, then out of the model. */
struct got {
	int64_t now, last;
	size_t n;
	int bad_order, not_due, not_live;
};

static void on_due(void *ctx, struct lf_node *n)
{
	struct got *g = ctx;
	int i = (int)(n - nodes);
	int64_t d = sc->deadline(n);
	g->not_live += !live[i];
	g->not_due += d > g->now || d != dl[i];
	g->bad_order += d < g->last;
	g->last = d;
	live[i] = 0;
	g->n++;
}

/* One collect at `now`, at most max: checks its hand-out against what is
 * still filed. */
static void collect(int64_t now, size_t max)
{
	struct got g = {.now = now, .last = INT64_MIN};
	size_t k = sc->collect(state, now, max, on_due, &g);
	CHECK_EQ(k, g.n);
	CHECK(k <= max);
	CHECK_EQ(g.not_live, 0);
	CHECK_EQ(g.not_due, 0);
	CHECK_EQ(g.bad_order, 0);
	if (k > 0)
		CHECK(g.last <= min_live()); /* nothing filed is due before it */
}

/* What the timer thread does at `now`: collect while something is due.
 * `refuse`: the heap cannot grow for the first rounds (what cannot move
 * waits in the wheel, the rounds go on), then memory comes back. */
static void run_until(int64_t now, size_t max, int refuse)
{
	int64_t next;
	int rounds = 0;
	if (refuse)
		tmo_testing_set_fault(fail_alloc, NULL);
	while ((next = sc->next_deadline(state)) <= now) {
		CHECK(next <= min_live());
		collect(now, max);
		if (++rounds == 50)
			tmo_testing_set_fault(NULL, NULL);
		if (rounds == 100000) { /* no progress: fail, do not spin on */
			CHECK(rounds < 100000);
			break;
		}
	}
	tmo_testing_set_fault(NULL, NULL);
	CHECK(next <= min_live());
	CHECK(min_live() > now); /* nothing due left behind */
}

static void insert(int i, int64_t d)
{
	tmo__heap_node_init(&nodes[i].s.heap);
	atomic_store(&nodes[i].aux, LF_IN_TT); /* as file_tt does */
	int rc = sc->insert(state, &nodes[i], d);
	if (rc == 0) {
		live[i] = 1;
		dl[i] = d;
		CHECK(sc->contains(&nodes[i]));
		CHECK_EQ(sc->deadline(&nodes[i]), d);
	} else {
		CHECK_EQ(rc, TMO_ENOMEM);
		CHECK(!sc->contains(&nodes[i]));
	}
}

/* A deadline from `now`: mostly within a few ticks, some a request's
 * length, some far (levels up, beyond the top), some already past. */
static int64_t draw(int64_t now)
{
	switch (sk_below(&rng, 8)) {
	case 0: return now - (int64_t)sk_below(&rng, 3 * MS);
	case 1: return now + (int64_t)sk_below(&rng, 200 * MS);
	case 2: return now + (int64_t)sk_below(&rng, (uint64_t)100000 * MS);
	case 3: return now + 5 * MS + (int64_t)sk_below(&rng, 20000); /* a cluster */
	default: return now + (int64_t)sk_below(&rng, 3 * MS);
	}
}

static void check_model(void)
{
	CHECK_EQ(sc->count(state), count_live());
	CHECK(sc->next_deadline(state) <= min_live());
	for (int i = 0; i < N; i += 97) {
		CHECK_EQ(sc->contains(&nodes[i]), live[i]);
		if (live[i]) {
			CHECK_EQ(atomic_load(&nodes[i].aux) & 3u, LF_IN_TT);
			CHECK_EQ(sc->deadline(&nodes[i]), dl[i]);
		}
	}
}

static void random_run(uint64_t seed, int steps)
{
	sk_rng_init(&rng, seed);
	reset();
	CHECK(sc->size <= sizeof state);
	CHECK_EQ(sc->init(state, 50000, ORIGIN), 0);
	int64_t now = ORIGIN;
	for (int step = 0; step < steps; step++) {
		int i = (int)sk_below(&rng, N);
		uint64_t op = sk_below(&rng, 100);
		if (op < 45) {
			if (!live[i])
				insert(i, draw(now));
		} else if (op < 75) {
			if (live[i]) {
				CHECK(sc->contains(&nodes[i]));
				sc->remove(state, &nodes[i]);
				live[i] = 0;
				CHECK(!sc->contains(&nodes[i]));
			}
		} else if (op < 97) {
			now += (int64_t)sk_below(&rng, 2 * MS);
			run_until(now, 1 + (size_t)sk_below(&rng, 300), sk_below(&rng, 10) == 0);
		} else if (op < 99) {
			/* settle: a collect with room leaves next_deadline exact */
			collect(now, (size_t)N * 2);
			CHECK_EQ(sc->next_deadline(state), min_live());
		} else {
			now += (int64_t)sk_below(&rng, (uint64_t)50000 * MS); /* a long sleep */
			run_until(now, (size_t)N, 0);
		}
		check_model();
	}
	run_until(INT64_MAX - 1, (size_t)N, 0); /* everything comes out */
	CHECK_EQ(sc->count(state), 0);
	sc->fini(state);
}

/* The timer thread's sleep ends at a deadline: a timeout alone, and a new
 * earliest, go to the heap at once; a later one waits in the wheel. */
static void test_sleep_exact(void)
{
	reset();
	CHECK_EQ(sc->init(state, 50000, ORIGIN), 0);
	CHECK_EQ(sc->next_deadline(state), INT64_MAX);
	insert(0, ORIGIN + 5000 * MS + 7);
	CHECK_EQ(sc->next_deadline(state), ORIGIN + 5000 * MS + 7);
	insert(1, ORIGIN + 3000 * MS + 3);
	CHECK_EQ(sc->next_deadline(state), ORIGIN + 3000 * MS + 3);
	insert(2, ORIGIN + 9000 * MS);
	CHECK_EQ(sc->next_deadline(state), ORIGIN + 3000 * MS + 3);
	CHECK(atomic_load(&nodes[2].aux) & LF_FAR);
	CHECK(!(atomic_load(&nodes[1].aux) & LF_FAR));
	/* the two in the heap fire at their deadlines; then the wheel's
	 * moves to the heap, and the sleep ends at its deadline */
	run_until(ORIGIN + 5000 * MS + 7, 8, 0);
	CHECK(!live[0] && !live[1] && live[2]);
	CHECK_EQ(sc->next_deadline(state), ORIGIN + 9000 * MS);
	run_until(ORIGIN + 9000 * MS, 8, 0);
	CHECK_EQ(sc->count(state), 0);
	sc->fini(state);
}

/* A fresh structure holding node N-1 at 100 ms (the heap's first: the
 * rest go far) and nodes 0..2999 due within the tick ending at 41 ms. */
static void burst_setup(uint64_t seed)
{
	reset();
	sk_rng_init(&rng, seed);
	CHECK_EQ(sc->init(state, 50000, ORIGIN), 0);
	insert(N - 1, ORIGIN + 100 * MS);
	for (int i = 0; i < 3000; i++)
		insert(i, ORIGIN + 40 * MS + (int64_t)sk_below(&rng, 900000));
}

/* A burst due within one tick, collected a few at a time: exact order. */
static void test_burst(void)
{
	burst_setup(7);
	int far = 0;
	for (int i = 0; i < 3000; i++)
		far += (atomic_load(&nodes[i].aux) & LF_FAR) != 0;
	CHECK(far > 2900); /* the new earliest ones only in the heap */
	run_until(ORIGIN + 41 * MS, 37, 0);
	CHECK_EQ(sc->count(state), 1);
	run_until(ORIGIN + 100 * MS, 37, 0);
	CHECK_EQ(sc->count(state), 0);
	sc->fini(state);
}

/* The heap cannot grow while a tick of 3000 moves (its array holds 1024):
 * what does not fit stays in the wheel, nothing is lost, and nothing
 * fires before a timer of the tick still in the wheel that is due
 * earlier (here: nothing fires until memory is back; the timer thread
 * looks again every round meanwhile); then all of it comes out. */
static void test_refused_growth(void)
{
	burst_setup(11);
	tmo_testing_set_fault(fail_alloc, NULL);
	for (int r = 0; r < 20; r++) {
		collect(ORIGIN + 41 * MS, 4096);
		CHECK_EQ(sc->count(state), count_live());
	}
	tmo_testing_set_fault(NULL, NULL);
	CHECK(count_live() > 1); /* not all of it could have come out */
	run_until(ORIGIN + 41 * MS, 4096, 0);
	CHECK_EQ(sc->count(state), 1);
	run_until(ORIGIN + 100 * MS, 4096, 0);
	CHECK_EQ(sc->count(state), 0);
	sc->fini(state);
}

/* The heap's only timers cancelled: what the wheel holds is then the
 * earliest, and next_deadline no later than it. */
static void test_heap_emptied(void)
{
	reset();
	CHECK_EQ(sc->init(state, 50000, ORIGIN), 0);
	insert(0, ORIGIN + 10 * MS);
	insert(1, ORIGIN + 30 * MS + 400000);
	insert(2, ORIGIN + 30 * MS + 900000);
	CHECK(atomic_load(&nodes[1].aux) & LF_FAR);
	sc->remove(state, &nodes[0]);
	live[0] = 0;
	CHECK(sc->next_deadline(state) <= ORIGIN + 30 * MS + 400000);
	run_until(ORIGIN + 30 * MS + 400000, 8, 0);
	CHECK(!live[1] && live[2]);
	CHECK_EQ(sc->next_deadline(state), ORIGIN + 30 * MS + 900000);
	run_until(ORIGIN + 31 * MS, 8, 0);
	CHECK_EQ(sc->count(state), 0);
	sc->fini(state);
}

/* 8 x 40,000 steps, scaled by TMO_TEST_SCALE (0.1 under the sanitizers:
 * the model's scans of every node make a step slow there). */
static void test_random(void)
{
	int steps = (int)et_scaled(40000, 2000);
	for (uint64_t seed = 1; seed <= 8; seed++)
		random_run(seed, steps);
}

int main(void)
{
	RUN(test_sleep_exact);
	RUN(test_burst);
	RUN(test_refused_growth);
	RUN(test_heap_emptied);
	RUN(test_random);
	return TEST_EXIT();
}
