/*
 * The timing wheel's bounded advance and its `expired` list
 * (src/ds/wheel.h: tmo__wheel_advance_max, next_expiry), on a virtual
 * clock.  The model-based checks of both are unit/wheel.c's and the fuzz
 * target's (tests/fuzz/wheel_model.h, bounded advances included).
 */
#include <stdint.h>

#include "check.h"
#include "ds/wheel.h"
#include "tmo/tmo.h"

/* A burst due in one tick comes out of advance_max a batch at a time: the
 * rest waits, still in the wheel (contains, del, count), due at the tick's
 * time, and all of it before the next tick's nodes. */
static void test_bounded_burst(void)
{
	enum { BURST = 10000, NEXT = 100, MAX = 1000 };
	static struct tmo_wheel_node n[BURST + NEXT];
	struct tmo_wheel w;
	const int64_t r = TMO_NSEC_PER_MSEC, at = 7 * r;
	tmo__wheel_init(&w, r, 0);
	for (int i = 0; i < BURST + NEXT; i++) {
		tmo__wheel_node_init(&n[i]);
		tmo__wheel_add(&w, &n[i], i < BURST ? at - 1 - i % 5 : at + r);
	}
	struct tmo_wheel_list due = {NULL};
	CHECK_EQ(tmo__wheel_advance_max(&w, 100 * r, MAX, &due), MAX);
	CHECK_EQ(tmo__wheel_count(&w), BURST + NEXT - MAX);
	CHECK_EQ(tmo__wheel_next_expiry(&w), at); /* the rest is due, at its tick */
	int left = -1;
	for (int i = 0; i < BURST && left < 0; i++)
		if (tmo__wheel_contains(&n[i]))
			left = i;
	CHECK(left >= 0);
	tmo__wheel_del(&w, &n[left]); /* a waiting one can still be cancelled */
	CHECK(!tmo__wheel_contains(&n[left]));
	long out = MAX, calls = 1, next_early = 0, burst_seen = MAX;
	size_t k;
	do {
		due.head = NULL;
		k = tmo__wheel_advance_max(&w, 100 * r, MAX, &due);
		CHECK(k <= MAX);
		for (struct tmo_wheel_node *p = due.head; p != NULL; p = p->next) {
			CHECK(p != &n[left]);
			if (p - n < BURST)
				burst_seen++;
			else if (burst_seen < BURST - 1)
				next_early++; /* a next-tick node before the burst was out */
		}
		out += (long)k;
		calls++;
	} while (k == MAX);
	CHECK_EQ(out, BURST + NEXT - 1);
	CHECK_EQ(burst_seen, BURST - 1);
	CHECK_EQ(next_early, 0);
	CHECK_EQ(tmo__wheel_count(&w), 0);
	CHECK_EQ(tmo__wheel_next_expiry(&w), INT64_MAX);
	CHECK(calls >= (BURST + NEXT - 1) / MAX);
}

/* A node added for a tick before the last processed one (an advance went
 * ahead of the engine's clock: the owner of a per-thread wheel hands out
 * what is due by now + 1 ms) is due at its own tick: next_expiry must not
 * say the last processed tick, or a caller at a time between would not
 * collect it, and would run later timers of other wheels first. */
static void test_next_expiry_of_late_node(void)
{
	const int64_t r = TMO_NSEC_PER_MSEC;
	struct tmo_wheel w;
	struct tmo_wheel_node n;
	tmo__wheel_init(&w, r, 0);
	tmo__wheel_node_init(&n);
	struct tmo_wheel_list due = {NULL};
	CHECK_EQ(tmo__wheel_advance(&w, 5 * r, &due), 0); /* ahead of a clock at 2 ms */
	tmo__wheel_add(&w, &n, 2 * r - 1);                 /* due at 2 ms */
	CHECK(tmo__wheel_next_expiry(&w) <= 2 * r);
	CHECK_EQ(tmo__wheel_advance(&w, 2 * r, &due), 1);
	CHECK(due.head == &n);
	CHECK_EQ(tmo__wheel_next_expiry(&w), INT64_MAX);
}

/* expired_min bounds what a split tick left: no more than its least
 * deadline, and no less than the least deadline the tick held (the slot's
 * min0, kept as nodes are put in it: the rest is not walked), so exact for
 * a burst of one instant (the engine fires a burst's batches by it:
 * src/lf/fire.c, split_hold); lowered by a late node, INT64_MAX once
 * `expired` is empty.  A slot emptied by deletes forgets its least. */
static void test_expired_min(void)
{
	enum { BURST = 3000, MAX = 1000 };
	static struct tmo_wheel_node n[BURST];
	static char given[BURST];
	struct tmo_wheel w;
	struct tmo_wheel_node late;
	const int64_t r = TMO_NSEC_PER_MSEC, at = 9 * r;
	tmo__wheel_init(&w, r, 0);
	CHECK_EQ(tmo__wheel_expired_min(&w), INT64_MAX);
	/* a node in the same tick, deleted again: its deadline is forgotten */
	tmo__wheel_node_init(&late);
	tmo__wheel_add(&w, &late, at - 999000);
	tmo__wheel_del(&w, &late);
	int64_t least_all = INT64_MAX;
	for (int i = 0; i < BURST; i++) {
		tmo__wheel_node_init(&n[i]);
		tmo__wheel_add(&w, &n[i], at - 1 - (i * 7919) % 900000); /* one tick, spread */
		if (n[i].deadline < least_all)
			least_all = n[i].deadline;
	}
	struct tmo_wheel_list due = {NULL};
	CHECK_EQ(tmo__wheel_advance_max(&w, at, MAX, &due), MAX);
	for (struct tmo_wheel_node *p = due.head; p != NULL; p = p->next)
		given[p - n] = 1;
	int64_t least = INT64_MAX;
	for (int i = 0; i < BURST; i++)
		if (!given[i] && n[i].deadline < least)
			least = n[i].deadline;
	CHECK(tmo__wheel_expired_min(&w) <= least);
	CHECK_EQ(tmo__wheel_expired_min(&w), least_all);
	tmo__wheel_add(&w, &late, 5 * r + 3); /* a tick already processed */
	CHECK_EQ(tmo__wheel_expired_min(&w), 5 * r + 3);
	do
		due.head = NULL;
	while (tmo__wheel_advance_max(&w, at, MAX, &due) == MAX);
	CHECK_EQ(tmo__wheel_count(&w), 0);
	CHECK_EQ(tmo__wheel_expired_min(&w), INT64_MAX);
	/* one instant: exact */
	tmo__wheel_init(&w, r, 0);
	for (int i = 0; i < BURST; i++) {
		tmo__wheel_node_init(&n[i]);
		tmo__wheel_add(&w, &n[i], at - 1);
	}
	due.head = NULL;
	CHECK_EQ(tmo__wheel_advance_max(&w, at, MAX, &due), MAX);
	CHECK_EQ(tmo__wheel_expired_min(&w), at - 1);
}

int main(void)
{
	RUN(test_bounded_burst);
	RUN(test_next_expiry_of_late_node);
	RUN(test_expired_min);
	return TEST_EXIT();
}
