/*
 * The timing wheel (src/ds/wheel.h) on a virtual clock: deterministic
 * cases, then seeded random runs against the reference model the fuzz
 * target checks with (tests/fuzz/wheel_model.h, which states the bound:
 * with r = resolution and o = the init time, a node with deadline d is due
 * at D(d) = o + ceil((d - o) / r) * r, and advance(now) returns exactly the
 * live nodes with D <= now, in non-decreasing D).  Here the runs also
 * follow next_expiry() as an engine would: it must reach a due node within
 * TMO_WHEEL_LEVELS + 2 steps.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "ds/wheel.h"
#include "engine_test.h"
#include "../fuzz/wheel_model.h" /* the model the fuzz target checks against */
#include "wheel_random.h"

#include "tmo/tmo.h"

/* ---- deterministic cases ---------------------------------------------------- */

/* A fresh node, added at `deadline`. */
static void add_new(struct tmo_wheel *w, struct tmo_wheel_node *n, int64_t deadline)
{
	tmo__wheel_node_init(n);
	tmo__wheel_add(w, n, deadline);
}

static size_t drain(struct tmo_wheel *w, int64_t now, struct tmo_wheel_node **out, size_t max)
{
	struct tmo_wheel_list due = {NULL};
	size_t k = tmo__wheel_advance(w, now, &due), i = 0;
	for (struct tmo_wheel_node *n = due.head; n; n = n->next) {
		CHECK(!tmo__wheel_contains(n));
		if (i < max)
			out[i] = n;
		i++;
	}
	CHECK_EQ(i, k);
	return k;
}

static void test_init_rejects_bad_resolution(void)
{
	struct tmo_wheel w;
	CHECK_EQ(tmo__wheel_init(&w, 0, 0), TMO_EINVAL);
	CHECK_EQ(tmo__wheel_init(&w, -5, 0), TMO_EINVAL);
	CHECK_EQ(tmo__wheel_init(&w, 1, 0), 0);
	CHECK_EQ(tmo__wheel_next_expiry(&w), INT64_MAX);
	CHECK_EQ(tmo__wheel_count(&w), 0);
}

/* r = 10, origin 1000: a deadline on a boundary is due at it, one past a
 * boundary is due at the next one. */
static void test_tick_boundaries(void)
{
	struct tmo_wheel w;
	struct tmo_wheel_node a, b, c, *out[4];
	tmo__wheel_init(&w, 10, 1000);
	add_new(&w, &a, 1010); /* on a boundary */
	add_new(&w, &b, 1011); /* just past one */
	add_new(&w, &c, 1000); /* at the origin */
	CHECK(tmo__wheel_contains(&a));
	CHECK_EQ(tmo__wheel_count(&w), 3);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 1000);
	CHECK_EQ(drain(&w, 999, out, 4), 0);
	CHECK_EQ(drain(&w, 1000, out, 4), 1);
	CHECK(out[0] == &c);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 1010);
	CHECK_EQ(drain(&w, 1009, out, 4), 0);
	CHECK_EQ(drain(&w, 1010, out, 4), 1);
	CHECK(out[0] == &a);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 1020);
	CHECK_EQ(drain(&w, 1019, out, 4), 0);
	CHECK_EQ(drain(&w, 1020, out, 4), 1);
	CHECK(out[0] == &b);
	CHECK_EQ(tmo__wheel_count(&w), 0);
	CHECK_EQ(tmo__wheel_next_expiry(&w), INT64_MAX);
}

/* A node added with a deadline whose tick was already processed is due at
 * the very next advance, even one to the same `now`. */
static void test_past_deadline_due_next_advance(void)
{
	struct tmo_wheel w;
	struct tmo_wheel_node a, *out[2];
	tmo__wheel_init(&w, 100, 0);
	CHECK_EQ(drain(&w, 550, out, 2), 0);
	tmo__wheel_node_init(&a);
	tmo__wheel_add(&w, &a, 500);
	CHECK(tmo__wheel_next_expiry(&w) <= 550);
	CHECK_EQ(drain(&w, 550, out, 2), 1);
	tmo__wheel_add(&w, &a, -1000000); /* before the origin */
	CHECK_EQ(drain(&w, 550, out, 2), 1);
	/* 550 is inside tick 5 (500..599), not processed past 600: a deadline
	 * of 560 is still in the future and due at 600. */
	tmo__wheel_add(&w, &a, 560);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 600);
	CHECK_EQ(drain(&w, 599, out, 2), 0);
	CHECK_EQ(drain(&w, 600, out, 2), 1);
}

/* Deleting the only node of a slot clears its bit; deleting one of two
 * keeps it. */
static void test_del_updates_bitmap(void)
{
	struct tmo_wheel w;
	struct tmo_wheel_node a, b, c, *out[2];
	tmo__wheel_init(&w, 1, 0);
	add_new(&w, &a, 5000);
	add_new(&w, &b, 5000);
	add_new(&w, &c, 7);
	tmo__wheel_del(&w, &c);
	CHECK(!tmo__wheel_contains(&c));
	CHECK(tmo__wheel_next_expiry(&w) > 7);
	tmo__wheel_del(&w, &a);
	CHECK(tmo__wheel_next_expiry(&w) <= 5000);
	tmo__wheel_del(&w, &b);
	CHECK_EQ(tmo__wheel_next_expiry(&w), INT64_MAX);
	CHECK_EQ(tmo__wheel_count(&w), 0);
	CHECK_EQ(drain(&w, INT64_MAX, out, 2), 0);
}

/* Deadlines beyond the top level (2^48 ticks) wait on the overflow list and
 * are not lost over jumps of many epochs, nor fire early. */
static void test_overflow_and_big_jumps(void)
{
	struct tmo_wheel w;
	struct tmo_wheel_node n[4], *out[4];
	const int64_t top = INT64_C(1) << (TMO_WHEEL_BITS * TMO_WHEEL_LEVELS);
	tmo__wheel_init(&w, 1, 0);
	for (int i = 0; i < 4; i++)
		tmo__wheel_node_init(&n[i]);
	tmo__wheel_add(&w, &n[0], 3 * top + 17);
	tmo__wheel_add(&w, &n[1], top - 1);
	tmo__wheel_add(&w, &n[2], TMO_TIMEOUT_MAX);
	tmo__wheel_add(&w, &n[3], top);
	CHECK(tmo__wheel_next_expiry(&w) <= top - 1);
	CHECK_EQ(drain(&w, top - 2, out, 4), 0);
	CHECK_EQ(drain(&w, top, out, 4), 2);
	CHECK(out[0] == &n[1] && out[1] == &n[3]);
	CHECK_EQ(drain(&w, 3 * top + 16, out, 4), 0);
	CHECK_EQ(drain(&w, 3 * top + 17, out, 4), 1);
	CHECK(out[0] == &n[0]);
	CHECK_EQ(drain(&w, TMO_TIMEOUT_MAX - 1, out, 4), 0);
	CHECK_EQ(drain(&w, INT64_MAX, out, 4), 1);
	CHECK(out[0] == &n[2]);
}

/* A few far timers: next_expiry() is exact (the earliest slot is scanned),
 * so an engine sleeping until it wakes once per timer.  A crowded slot
 * gives its start instead, still a lower bound. */
static void test_next_expiry_exact_when_sparse(void)
{
	const int64_t ms = TMO_NSEC_PER_MSEC, s = TMO_NSEC_PER_SEC;
	struct tmo_wheel w;
	struct tmo_wheel_node a, b, c, crowd[20], *out[20];
	tmo__wheel_init(&w, ms, 0);
	add_new(&w, &a, 10 * s);
	add_new(&w, &b, 20 * s + 1); /* rounded up to 20.001 s */
	add_new(&w, &c, 300 * s);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 10 * s);
	CHECK_EQ(drain(&w, 10 * s - 1, out, 3), 0);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 10 * s);
	CHECK_EQ(drain(&w, 10 * s, out, 3), 1);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 20 * s + ms);
	CHECK_EQ(drain(&w, 20 * s + ms, out, 3), 1);
	CHECK_EQ(tmo__wheel_next_expiry(&w), 300 * s);
	tmo__wheel_del(&w, &c);

	/* beyond the top level: exact from the overflow list's minimum */
	struct tmo_wheel w1;
	tmo__wheel_init(&w1, 1, 0);
	tmo__wheel_add(&w1, &a, (INT64_C(1) << 50) + 5);
	tmo__wheel_add(&w1, &b, (INT64_C(1) << 51));
	CHECK_EQ(tmo__wheel_next_expiry(&w1), (INT64_C(1) << 50) + 5);

	/* Now at tick 20001 (64 * 312 + 33).  20 timers at ticks 20136 ..
	 * 20155, all in the level-1 slot of ticks 20096 .. 20159: more than
	 * the scan reads, so next_expiry is the slot's start. */
	for (int i = 0; i < 20; i++) {
		tmo__wheel_node_init(&crowd[i]);
		tmo__wheel_add(&w, &crowd[i], (20136 + i) * ms);
	}
	CHECK_EQ(tmo__wheel_next_expiry(&w), 20096 * ms);
	CHECK_EQ(drain(&w, 20096 * ms, out, 20), 0);
	/* that advance cascaded the slot to level 0: exact again */
	CHECK_EQ(tmo__wheel_next_expiry(&w), 20136 * ms);
	CHECK_EQ(drain(&w, 20155 * ms, out, 20), 20);
}

/* One advance spanning many ticks returns them in tick order. */
static void test_order_across_ticks(void)
{
	struct tmo_wheel w;
	struct tmo_wheel_node n[64], *out[64];
	tmo__wheel_init(&w, 3, 0);
	for (int i = 0; i < 64; i++) {
		tmo__wheel_node_init(&n[i]);
		/* scrambled deadlines 0 .. 63*4100, across levels 0..2 */
		tmo__wheel_add(&w, &n[i], (int64_t)((i * 37) % 64) * 4100);
	}
	CHECK_EQ(drain(&w, 64 * 4100, out, 64), 64);
	for (int i = 1; i < 64; i++)
		CHECK(out[i - 1]->deadline <= out[i]->deadline);
}

/* ---- randomized comparison with the model --------------------------------- */

#define NODES 256

/* The model's mismatches (the first ten printed): run_model counts them. */
static void on_mismatch(const struct model *m, const char *file, int line, const char *msg)
{
	if (m->mismatches <= 10)
		fprintf(stderr, "%s:%d: wheel model violation: %s\n", file, line, msg);
}

/* Follow next_expiry() as an engine would until something is due: it must
 * get there in a bounded number of steps, without passing a due time. */
static void model_chase(struct wheel_model *m)
{
	if (m->m.n == 0)
		return;
	for (int step = 0; step < TMO_WHEEL_LEVELS + 2; step++) {
		int64_t ne = tmo__wheel_next_expiry(&m->w);
		if (ne == INT64_MAX && wm_next_due(m) == INT64_MAX)
			return; /* only nodes beyond the clock's range */
		if (wm_advance(m, ne) > 0)
			return;
	}
	model_fail(&m->m, __FILE__, __LINE__, "next_expiry did not reach a due node in %d steps",
	           TMO_WHEEL_LEVELS + 2);
}

static long run_model(uint64_t seed, int64_t r, int64_t origin, int ops, size_t max)
{
	static struct wheel_model m;
	sk_rng_init(&rng, seed);
	if (wm_init(&m, r, origin, NODES, on_mismatch) != 0)
		return 1;
	m.max = max;
	for (int op = 0; op < ops && m.m.mismatches == 0; op++) {
		int idx = (int)below(NODES);
		unsigned what = (unsigned)below(16);
		if (what < 4) {
			wm_arm(&m, idx, random_deadline(&m));
		} else if (what < 8) {
			int64_t d = random_deadline(&m);
			wm_arm_with(&m, idx, d, 1, random_near(&m, d));
		}
		else if (what < 11)
			wm_cancel(&m, idx);
		else if (what < 15)
			wm_advance(&m, random_now(&m));
		else
			model_chase(&m);
		wm_check_state(&m);
	}
	if (m.m.mismatches)
		fprintf(stderr, "seed %" PRIu64 " r %" PRId64 " origin %" PRId64 ": %ld violations\n",
		        seed, r, origin, m.m.mismatches);
	return m.m.mismatches;
}

static void test_random_against_model(void)
{
	/* Resolutions: tiny, odd, the engines' 1 ms, a large prime, 2^40 + 1
	 * (deadlines span few ticks); origins down to INT64_MIN, so tick
	 * arithmetic spans the whole 64-bit range. */
	static const int64_t res[] = {1, 7, 1000, TMO_NSEC_PER_MSEC, 999999937,
	                              (INT64_C(1) << 40) + 1};
	static const int64_t origins[] = {0, -123456789, INT64_C(5000000000000), 1, INT64_MIN};
	const int nres = (int)(sizeof res / sizeof res[0]);
	const int norig = (int)(sizeof origins / sizeof origins[0]);
	long total = 0;
	for (int i = 0; i < nres; i++)
		for (int j = 0; j < norig; j++)
			for (uint64_t seed = 1; seed <= 6; seed++)
				/* seeds 5 and 6: advances bounded to 1 and 3 nodes */
				total += run_model(seed * 1000 + (uint64_t)(i * 10 + j), res[i], origins[j],
				                   (int)et_scaled(20000, 1000),
				                   seed <= 4 ? SIZE_MAX : seed == 5 ? 1 : 3);
	CHECK_EQ(total, 0);
}

/* Tick arithmetic at the ends of the range: origin INT64_MIN, deadlines
 * up to INT64_MAX (a distance of 2^64 - 1), odd resolutions.  The due time
 * of each is computed here with 128-bit arithmetic, independently of the
 * wheel's division. */
static void test_extreme_range(void)
{
	static const int64_t res[] = {1, 3, 999999937, INT64_MAX / 3, INT64_MAX};
	static const int64_t dl[] = {INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX / 2,
	                             INT64_MAX - 1, INT64_MAX};
	for (unsigned i = 0; i < sizeof res / sizeof res[0]; i++) {
		for (unsigned j = 0; j < sizeof dl / sizeof dl[0]; j++) {
			struct tmo_wheel w;
			struct tmo_wheel_node n, *out[1];
			tmo__wheel_init(&w, res[i], INT64_MIN);
			tmo__wheel_node_init(&n);
			tmo__wheel_add(&w, &n, dl[j]);
			__int128 dist = (__int128)dl[j] - INT64_MIN, r = res[i];
			__int128 due = (__int128)INT64_MIN + (dist + r - 1) / r * r;
			int64_t ne = tmo__wheel_next_expiry(&w);
			if (due > INT64_MAX) {
				/* beyond the clock: never due (next_expiry is only a
				 * lower bound: it may be a slot start before INT64_MAX) */
				CHECK_EQ(drain(&w, INT64_MAX, out, 1), 0);
				CHECK_EQ(tmo__wheel_count(&w), 1);
				continue;
			}
			CHECK(ne <= (int64_t)due);
			if ((int64_t)due > INT64_MIN)
				CHECK_EQ(drain(&w, (int64_t)due - 1, out, 1), 0);
			/* follow next_expiry as an engine would */
			for (int step = 0; step < TMO_WHEEL_LEVELS + 2 && tmo__wheel_count(&w); step++)
				drain(&w, tmo__wheel_next_expiry(&w), out, 1);
			if (tmo__wheel_count(&w) != 0)
				fprintf(stderr, "r %lld deadline %lld: not due at %lld\n", (long long)res[i],
				        (long long)dl[j], (long long)due);
			CHECK_EQ(tmo__wheel_count(&w), 0);
		}
	}
}

/* Advance w to tick t: what came due in *due (counted into *fired); returns
 * how many nodes the advance re-filed on the way. */
static uint64_t advance_refiled(struct tmo_wheel *w, int64_t t, struct tmo_wheel_list *due,
                                uint64_t *fired)
{
	uint64_t before = tmo__wheel_refiled(w);
	due->head = NULL;
	*fired += tmo__wheel_advance(w, t, due);
	return tmo__wheel_refiled(w) - before;
}

/* Time passing by one tick at a time re-files a share per tick, never a
 * whole slot: n nodes due over `span` ticks (across level-1 and level-2
 * boundaries), stepped tick by tick.  Each pending list moves what it has
 * left over the ticks left before it must be empty, about 64/63 of the
 * density per level, so no step may move more than 2 x levels x (density
 * + 1) nodes; filing a whole slot at its boundary moves 64 x density (a
 * level-1 slot) or up to 4,096 x density (level 2).  At 100 a tick a
 * level-2 slot holds 409,600 nodes, more than 16 bits count.  Order and
 * count are checked on the way. */
static void refiling_is_spread(int n, int64_t span)
{
	static struct tmo_wheel_node node[1000000];
	static struct tmo_wheel w;
	struct tmo_wheel_list due = {NULL};
	const int64_t start = 3000;
	tmo__wheel_init(&w, 1, 0);
	tmo__wheel_advance(&w, start, &due);
	uint64_t x = 88172645463325252u;
	for (int i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		add_new(&w, &node[i], start + 50 + (int64_t)(x % (uint64_t)span));
	}
	const uint64_t bound = 2 * TMO_WHEEL_LEVELS * ((uint64_t)n / (uint64_t)span + 1);
	uint64_t worst = 0, fired = 0;
	int64_t worst_at = 0, prev = INT64_MIN;
	for (int64_t t = start + 1; t <= start + 50 + span; t++) {
		uint64_t moved = advance_refiled(&w, t, &due, &fired);
		for (struct tmo_wheel_node *d = due.head; d; d = d->next) {
			CHECK(d->deadline <= t && d->deadline >= prev);
			prev = d->deadline;
		}
		if (moved > worst)
			worst = moved, worst_at = t;
	}
	if (worst > bound)
		fprintf(stderr, "%d over %lld ticks: advance to tick %lld re-filed %llu nodes (bound %llu)\n",
		        n, (long long)span, (long long)worst_at, (unsigned long long)worst,
		        (unsigned long long)bound);
	CHECK(worst <= bound);
	CHECK_EQ(fired, (uint64_t)n);
	CHECK_EQ(tmo__wheel_count(&w), 0);
}

static void test_refiling_is_spread(void)
{
	refiling_is_spread(200000, 20000);
	refiling_is_spread(1000000, 10000);
}

/* A full slot is paced by its own count, not the wheel's: FULL nodes in
 * one level-1 slot (ticks 192-255, more than 16 bits count) beside
 * OTHERS in the level-1 slots of the next level-1 block.  While T crosses
 * ticks 128-191 the slot moves down a share a tick, its count over the
 * ticks left: no step may move more than twice that.  With a count that
 * stuck at 65,535, the wheel's count (FULL + OTHERS) sized the shares:
 * 9,000 nodes a tick where 1,100 were due (a million timers over a
 * second stalled 4.5 ms at such a slot). */
static void test_full_slot_paced_by_its_count(void)
{
	enum { FULL = 70000, OTHERS = 500000 };
	static struct tmo_wheel_node node[FULL + OTHERS];
	static struct tmo_wheel w;
	struct tmo_wheel_list due = {NULL};
	CHECK_EQ(tmo__wheel_init(&w, 1, 0), 0);
	for (int i = 0; i < FULL; i++)
		add_new(&w, &node[i], 192 + i % 64);
	for (int i = 0; i < OTHERS; i++)
		add_new(&w, &node[FULL + i], 4096 + i % 4096);
	const uint64_t bound = 2 * ((uint64_t)FULL / 63 + 1);
	uint64_t worst = 0, fired = 0;
	int64_t worst_at = 0;
	for (int64_t t = 1; t <= 255; t++) {
		uint64_t moved = advance_refiled(&w, t, &due, &fired);
		if (t >= 128 && t < 192 && moved > worst)
			worst = moved, worst_at = t;
	}
	if (worst > bound)
		fprintf(stderr, "a slot of %d: advance to tick %lld re-filed %llu nodes (bound %llu)\n",
		        FULL, (long long)worst_at, (unsigned long long)worst,
		        (unsigned long long)bound);
	CHECK(worst <= bound);
	CHECK(worst > 0);
	CHECK_EQ(fired, (uint64_t)FULL);
	CHECK_EQ(tmo__wheel_count(&w), (uint64_t)OTHERS);
}

int main(void)
{
	et_case_watchdog(60); /* a misplaced node can make advance() loop */
	RUN(test_init_rejects_bad_resolution);
	RUN(test_tick_boundaries);
	RUN(test_past_deadline_due_next_advance);
	RUN(test_del_updates_bitmap);
	RUN(test_overflow_and_big_jumps);
	RUN(test_order_across_ticks);
	RUN(test_next_expiry_exact_when_sparse);
	RUN(test_extreme_range);
	RUN(test_random_against_model);
	RUN(test_refiling_is_spread);
	RUN(test_full_slot_paced_by_its_count);
	return TEST_EXIT();
}
