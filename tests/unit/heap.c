/*
 * The heap against a reference model.
 *
 * The model is the set of live nodes kept in (deadline, seq) order by plain
 * insertion into a sorted array; every pop must return the model's first
 * element, every remove must leave the rest intact.  After every operation
 * the heap's own invariants are checked: each node's index is its position,
 * no child is before its parent, and the array stays between the grow and
 * shrink bounds.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/internal.h" /* tmo__heap_init: the heap on the counted allocator */
#include "ds/heap.h"
#include "engine_test.h" /* sk_rng */
#include "tmo/testing.h"
#include "tmo/tmo.h"

static struct sk_rng rng; /* seeded per run: a failure replays from its seed */
static uint32_t rnd_below(uint32_t n) { return (uint32_t)sk_below(&rng, n); }

struct item {
	struct tmo_heap_node node;
	uint32_t id;
	int64_t deadline; /* what the model believes */
	uint64_t order;   /* push order, the model's tie-break */
};

#define MAXN 6000u
static struct item items[MAXN];
/* The model: pointers to live items sorted by (deadline, order). */
static struct item *model[MAXN];
static uint32_t model_n;

static int model_before(const struct item *x, const struct item *y)
{
	return x->deadline < y->deadline || (x->deadline == y->deadline && x->order < y->order);
}

static void model_insert(struct item *it)
{
	uint32_t i = model_n++;
	while (i > 0 && model_before(it, model[i - 1])) {
		model[i] = model[i - 1];
		i--;
	}
	model[i] = it;
}

static void model_erase(struct item *it)
{
	uint32_t i = 0;
	while (i < model_n && model[i] != it)
		i++;
	CHECK(i < model_n);
	if (i == model_n)
		return;
	memmove(&model[i], &model[i + 1], (model_n - i - 1) * sizeof model[0]);
	model_n--;
}

/* Invariants of the heap itself; returns the number of violations. */
static int heap_violations(const struct tmo_heap *h)
{
	int bad = 0;
	unsigned k = h->log2_arity;
	if (h->n > h->cap)
		bad++;
	for (uint32_t i = 0; i < h->n; i++) {
		const struct tmo_heap_node *x = h->a[i];
		if (x->index != i)
			bad++;
		if (i > 0) {
			const struct tmo_heap_node *p = h->a[(i - 1) >> k];
			if (x->deadline < p->deadline ||
			    (x->deadline == p->deadline && x->seq < p->seq))
				bad++;
		}
	}
	return bad;
}

static uint64_t push_order;

static int push(struct tmo_heap *h, struct item *it, int64_t deadline)
{
	int rc = tmo__heap_push(h, &it->node, deadline);
	if (rc == 0) {
		it->deadline = deadline;
		it->order = push_order++;
		model_insert(it);
	}
	return rc;
}

/* The counted allocator without realloc: the heap's other way to resize
 * (allocate, copy, free), which every heap in the tree has realloc for. */
static const struct tmo_heap_mem copy_mem = {tmo__malloc, tmo__free, NULL};

/* One randomized run: `steps` operations with deadlines drawn from
 * [0, spread) (a small spread gives many equal deadlines), on the
 * counted allocator (mem NULL) or on mem. */
static void random_run_with(unsigned arity, uint32_t min_cap, uint64_t seed, int steps,
                            int64_t spread, const struct tmo_heap_mem *mem)
{
	struct tmo_heap h;
	if (mem != NULL)
		CHECK_EQ(tmo__heap_init_with(&h, arity, min_cap, mem), 0);
	else
		CHECK_EQ(tmo__heap_init(&h, arity, min_cap), 0);
	sk_rng_init(&rng, seed);
	model_n = 0;
	for (uint32_t i = 0; i < MAXN; i++) {
		items[i].id = i;
		tmo__heap_node_init(&items[i].node);
	}
	/* Phases bias the mix toward growth, then toward draining, so the
	 * array grows and shrinks several times within one run. */
	int bad = 0;
	uint32_t peak = 0;
	for (int s = 0; s < steps && bad == 0; s++) {
		int phase = (s / 4000) % 3; /* 0: grow, 1: drain, 2: balanced */
		uint32_t r = rnd_below(100);
		uint32_t p_push = phase == 0 ? 70 : phase == 1 ? 25 : 50;
		if (r < p_push && model_n < MAXN) {
			struct item *it;
			do
				it = &items[rnd_below(MAXN)];
			while (tmo__heap_contains(&it->node));
			if (push(&h, it, (int64_t)rnd_below((uint32_t)spread) - spread / 2) != 0)
				bad++;
		} else if (r < p_push + 15 || model_n == 0) {
			struct tmo_heap_node *top = tmo__heap_pop(&h);
			if (model_n == 0) {
				if (top != NULL)
					bad++;
			} else {
				struct item *want = model[0];
				if (top != &want->node) {
					fprintf(stderr, "pop: got id %u, want id %u (deadline %lld)\n",
					        top ? ((struct item *)(void *)top)->id : 0u, want->id,
					        (long long)want->deadline);
					bad++;
				}
				if (top != NULL && tmo__heap_contains(top))
					bad++;
				model_erase(want);
			}
		} else {
			struct item *it = model[rnd_below(model_n)];
			tmo__heap_remove(&h, &it->node);
			if (tmo__heap_contains(&it->node))
				bad++;
			model_erase(it);
		}
		if (tmo__heap_size(&h) != model_n)
			bad++;
		struct tmo_heap_node *pk = tmo__heap_peek(&h);
		if (model_n ? pk != &model[0]->node : pk != NULL)
			bad++;
		if (tmo__heap_bytes(&h) != (uint64_t)h.cap * sizeof(void *))
			bad++;
		/* Shrink bound: after any remove the array is not mostly empty
		 * (the floor is min_cap). */
		if (h.cap > min_cap && h.cap > 8 && h.n < h.cap / 4)
			bad++;
		if (model_n > peak)
			peak = model_n;
		if ((s & 63) == 0 || model_n < 64)
			bad += heap_violations(&h);
	}
	CHECK_EQ(bad, 0);
	CHECK(peak > 1000); /* the run really grew the array */
	/* Drain what is left: the order must be the model's. */
	while (model_n > 0) {
		struct tmo_heap_node *top = tmo__heap_pop(&h);
		if (top != &model[0]->node) {
			bad++;
			break;
		}
		model_erase(model[0]);
	}
	CHECK_EQ(bad, 0);
	CHECK(tmo__heap_pop(&h) == NULL);
	CHECK(h.cap <= (min_cap > 8 ? min_cap : 8));
	tmo__heap_fini(&h);
}

static void random_run(unsigned arity, uint32_t min_cap, uint64_t seed, int steps,
                       int64_t spread)
{
	random_run_with(arity, min_cap, seed, steps, spread, NULL);
}

static void test_random_binary(void)
{
	random_run(2, 0, 1, 30000, 1000);
	random_run(2, 16, 2, 30000, 8);  /* many ties */
	random_run(2, 1, 3, 30000, INT32_MAX);
}

static void test_random_quaternary(void)
{
	random_run(4, 0, 11, 30000, 1000);
	random_run(4, 16, 12, 30000, 8);
	random_run(4, 3, 13, 30000, INT32_MAX);
}

/* Equal deadlines pop in push order, including after removals in between
 * and with extreme deadlines. */
static void test_fifo_ties(void)
{
	for (unsigned arity = 2; arity <= 4; arity += 2) {
		struct tmo_heap h;
		CHECK_EQ(tmo__heap_init(&h, arity, 4), 0);
		static struct item t[200];
		for (uint32_t i = 0; i < 200; i++) {
			t[i].id = i;
			tmo__heap_node_init(&t[i].node);
			int64_t d = i % 3 == 0 ? INT64_MAX : i % 3 == 1 ? 5 : INT64_MIN;
			CHECK_EQ(tmo__heap_push(&h, &t[i].node, d), 0);
		}
		for (uint32_t i = 0; i < 200; i += 7)
			tmo__heap_remove(&h, &t[i].node);
		int bad = 0;
		int64_t last_d = INT64_MIN;
		int last_id = -1;
		struct tmo_heap_node *x;
		uint32_t popped = 0;
		while ((x = tmo__heap_pop(&h)) != NULL) {
			struct item *it = (struct item *)(void *)x;
			if (it->id % 7 == 0)
				bad++; /* a removed node came back */
			if (x->deadline < last_d || (x->deadline == last_d && (int)it->id < last_id))
				bad++;
			last_d = x->deadline;
			last_id = (int)it->id;
			popped++;
		}
		CHECK_EQ(bad, 0);
		CHECK_EQ(popped, 200 - 29);
		tmo__heap_fini(&h);
	}
}

/* Bytes accounting: the array doubles on growth, halves when under a
 * quarter full, never goes below min_cap, and frees everything at fini. */
static void test_bytes(void)
{
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo_heap h;
	CHECK_EQ(tmo__heap_init(&h, 4, 32), 0);
	CHECK_EQ(tmo__heap_bytes(&h), 32 * sizeof(void *));
	static struct item t[4096];
	for (uint32_t i = 0; i < 4096; i++) {
		tmo__heap_node_init(&t[i].node);
		CHECK_EQ(tmo__heap_push(&h, &t[i].node, (int64_t)(i * 7919 % 4096)), 0);
	}
	CHECK_EQ(tmo__heap_bytes(&h), 4096 * sizeof(void *));
	/* One more node doubles the array... */
	static struct item extra;
	tmo__heap_node_init(&extra.node);
	CHECK_EQ(tmo__heap_push(&h, &extra.node, 0), 0);
	CHECK_EQ(tmo__heap_bytes(&h), 8192 * sizeof(void *));
	/* ...and removing it again does not shrink (hysteresis). */
	tmo__heap_remove(&h, &extra.node);
	CHECK_EQ(tmo__heap_bytes(&h), 8192 * sizeof(void *));
	/* Cancel a burst: down to 2047 live of 8192 slots -> halve. */
	uint32_t live = 4096;
	for (uint32_t i = 0; live > 2048; i++, live--)
		tmo__heap_remove(&h, &t[i].node);
	CHECK_EQ(tmo__heap_bytes(&h), 8192 * sizeof(void *));
	tmo__heap_remove(&h, &t[2048].node);
	live--;
	CHECK_EQ(tmo__heap_size(&h), 2047);
	CHECK_EQ(tmo__heap_bytes(&h), 4096 * sizeof(void *));
	/* Drain completely: back to the floor, not below it. */
	while (tmo__heap_pop(&h) != NULL)
		;
	CHECK_EQ(tmo__heap_bytes(&h), 32 * sizeof(void *));
	CHECK_EQ(tmo_testing_live_allocs(), live0 + 1);
	tmo__heap_fini(&h);
	CHECK_EQ(tmo__heap_bytes(&h), 0);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

static int fail_alloc(enum tmo_fault_kind kind, void *ctx)
{
	(void)ctx;
	return kind == TMO_FAULT_ALLOC;
}

/* h, made with capacity 4, holds t[0..3] (deadlines 10..7); a fifth push,
 * whose growth cannot allocate, reports TMO_ENOMEM and leaves both the
 * node (not in) and the heap (unchanged) intact. */
static void fill_then_refuse(struct tmo_heap *h, struct item *t)
{
	for (uint32_t i = 0; i < 5; i++)
		tmo__heap_node_init(&t[i].node);
	for (uint32_t i = 0; i < 4; i++)
		CHECK_EQ(tmo__heap_push(h, &t[i].node, 10 - (int64_t)i), 0);
	tmo_testing_set_fault(fail_alloc, NULL);
	CHECK_EQ(tmo__heap_push(h, &t[4].node, 0), TMO_ENOMEM);
	tmo_testing_set_fault(NULL, NULL);
	CHECK(!tmo__heap_contains(&t[4].node));
	CHECK_EQ(tmo__heap_size(h), 4);
	CHECK_EQ(heap_violations(h), 0);
}

/* A growth that cannot allocate (fill_then_refuse); a shrink that cannot
 * allocate keeps the larger array. */
static void test_enomem(void)
{
	struct tmo_heap h;
	CHECK_EQ(tmo__heap_init(&h, 2, 4), 0);
	static struct item t[64];
	for (uint32_t i = 5; i < 64; i++)
		tmo__heap_node_init(&t[i].node);
	fill_then_refuse(&h, t);
	for (uint32_t i = 4; i < 64; i++)
		CHECK_EQ(tmo__heap_push(&h, &t[i].node, (int64_t)i), 0);
	CHECK_EQ(tmo__heap_bytes(&h), 64 * sizeof(void *));
	tmo_testing_set_fault(fail_alloc, NULL);
	for (uint32_t i = 0; i < 60; i++)
		tmo__heap_remove(&h, &t[i].node);
	tmo_testing_set_fault(NULL, NULL);
	CHECK_EQ(tmo__heap_bytes(&h), 64 * sizeof(void *)); /* could not shrink */
	CHECK_EQ(heap_violations(&h), 0);
	CHECK(tmo__heap_pop(&h) == &t[60].node);
	tmo__heap_fini(&h);
	CHECK(!tmo__heap_contains(&t[61].node)); /* fini marks leftovers out */
}

/* Growing and shrinking by allocate, copy and free (no realloc) keeps
 * every node where the model says, and frees what it allocated. */
static void test_random_copy(void)
{
	int64_t live0 = tmo_testing_live_allocs();
	random_run_with(2, 0, 21, 30000, 1000, &copy_mem);
	random_run_with(4, 3, 22, 30000, 8, &copy_mem);
	/* a growth whose allocation fails: the push is refused, nothing lost */
	struct tmo_heap h;
	static struct item t[5];
	CHECK_EQ(tmo__heap_init_with(&h, 4, 4, &copy_mem), 0);
	fill_then_refuse(&h, t);
	CHECK(tmo__heap_pop(&h) == &t[3].node);
	tmo__heap_fini(&h);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

static void test_bad_init(void)
{
	struct tmo_heap h;
	CHECK_EQ(tmo__heap_init(&h, 3, 0), TMO_EINVAL);
	CHECK_EQ(tmo__heap_init(&h, 8, 0), TMO_EINVAL);
	CHECK_EQ(tmo__heap_init(&h, 0, 0), TMO_EINVAL);
	CHECK_EQ(tmo__heap_init(&h, 2, 0), 0);
	CHECK(tmo__heap_peek(&h) == NULL);
	CHECK(tmo__heap_pop(&h) == NULL);
	tmo__heap_fini(&h);
}

/* Reserve: room by doublings, as push grows; below it no push allocates
 * (nothing may fail there: the near/far structure moves a tick's timers
 * into the heap after reserving, src/lf/schedule.c); refused, the array
 * and its nodes stay as they were. */
static void test_reserve(void)
{
	struct tmo_heap h;
	CHECK_EQ(tmo__heap_init(&h, 4, 16), 0);
	CHECK_EQ(tmo__heap_reserve(&h, 10), 0);
	CHECK_EQ(tmo__heap_bytes(&h), 16 * sizeof(void *)); /* had room */
	CHECK_EQ(tmo__heap_reserve(&h, 100), 0);
	CHECK_EQ(tmo__heap_bytes(&h), 128 * sizeof(void *));
	static struct item t[300];
	tmo_testing_set_fault(fail_alloc, NULL); /* below the room: no allocation */
	for (uint32_t i = 0; i < 128; i++) {
		tmo__heap_node_init(&t[i].node);
		CHECK_EQ(tmo__heap_push(&h, &t[i].node, (int64_t)(i * 37 % 128)), 0);
	}
	CHECK_EQ(tmo__heap_reserve(&h, 129), TMO_ENOMEM);
	tmo_testing_set_fault(NULL, NULL);
	CHECK_EQ(tmo__heap_bytes(&h), 128 * sizeof(void *));
	CHECK_EQ(tmo__heap_size(&h), 128);
	CHECK_EQ(heap_violations(&h), 0);
	CHECK_EQ(tmo__heap_reserve(&h, UINT32_MAX), TMO_ENOMEM); /* past the largest */
	CHECK_EQ(tmo__heap_reserve(&h, 300), 0);
	CHECK_EQ(tmo__heap_bytes(&h), 512 * sizeof(void *));
	CHECK_EQ(heap_violations(&h), 0);
	for (int64_t want = 0; want < 128; want++)
		CHECK_EQ(tmo__heap_pop(&h)->deadline, want);
	tmo__heap_fini(&h);
}

int main(void)
{
	RUN(test_bad_init);
	RUN(test_fifo_ties);
	RUN(test_bytes);
	RUN(test_enomem);
	RUN(test_reserve);
	RUN(test_random_binary);
	RUN(test_random_quaternary);
	RUN(test_random_copy);
	return TEST_EXIT();
}
