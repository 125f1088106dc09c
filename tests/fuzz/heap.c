/*
 * libFuzzer target for the min-heap (src/ds/heap.h).
 *
 * The input is a program on a virtual clock: a header picks the arity and
 * the initial capacity, then each op byte arms a timer at now + delta,
 * cancels one, advances the clock (by a delta, or to the next deadline or
 * one before it) and fires what is due the way an engine does -- pop while
 * the minimum's deadline <= now -- or makes the next allocation fail.  A
 * reference model -- the armed timers in a list sorted by (deadline, arm
 * order) -- says exactly what must fire at each advance and in which order
 * (the heap promises push order for equal deadlines), what peek() must
 * show, how many are in, and which push must report TMO_ENOMEM (a push
 * that has to grow the array while the allocation fails; the timer is then
 * not in the heap).  At the end (header bit 4) either everything fires, or
 * fini() runs with timers still in and must mark them out; either way it
 * must release every allocation.
 * Any mismatch aborts.
 */
#include <string.h>

#include "core/internal.h" /* tmo__heap_init: the heap on the counted allocator */
#include "ds/heap.h"
#include "input.h"
#include "model.h"

#include "tmo/testing.h"
#include "tmo/tmo.h"

#define NODES 96

struct fuzz_heap {
	struct tmo_heap h;
	struct tmo_heap_node node[NODES];
	struct model m; /* live timers by (deadline, arm order): due is the deadline */
	int64_t now;
};

/* Fail every allocation while set: one op's worth. */
static int fail_allocs;
static int fault_hook(enum tmo_fault_kind kind, void *ctx)
{
	(void)ctx;
	return kind == TMO_FAULT_ALLOC && fail_allocs;
}

static void check_state(struct fuzz_heap *f)
{
	FUZZ_CHECK(tmo__heap_size(&f->h) == (uint32_t)f->m.n, "size %u, model %d",
	           tmo__heap_size(&f->h), f->m.n);
	FUZZ_CHECK(f->h.n <= f->h.cap, "size %u above capacity %u", f->h.n, f->h.cap);
	FUZZ_CHECK(tmo__heap_bytes(&f->h) >= (uint64_t)f->h.n * sizeof(void *),
	           "heap_bytes %llu for %u nodes", (unsigned long long)tmo__heap_bytes(&f->h),
	           f->h.n);
	struct tmo_heap_node *top = tmo__heap_peek(&f->h);
	if (f->m.n == 0)
		FUZZ_CHECK(top == NULL, "peek of an empty heap is not NULL");
	else
		FUZZ_CHECK(top == &f->node[f->m.sorted[0].idx], "peek shows node %d, model %d",
		           top ? (int)(top - f->node) : -1, f->m.sorted[0].idx);
}

static void cancel(struct fuzz_heap *f, int idx)
{
	if (!model_armed(&f->m, idx, tmo__heap_contains(&f->node[idx])))
		return;
	tmo__heap_remove(&f->h, &f->node[idx]);
	FUZZ_CHECK(!tmo__heap_contains(&f->node[idx]), "node %d still in after remove", idx);
	model_drop(&f->m, idx);
}

static void arm(struct fuzz_heap *f, int idx, int64_t deadline, int fail)
{
	cancel(f, idx); /* re-arm: like an engine's reschedule */
	int must_grow = f->h.n == f->h.cap;
	fail_allocs = fail;
	int rc = tmo__heap_push(&f->h, &f->node[idx], deadline);
	fail_allocs = 0;
	if (fail && must_grow) {
		FUZZ_CHECK(rc == TMO_ENOMEM, "push that had to grow with allocations failing: %d", rc);
		FUZZ_CHECK(!tmo__heap_contains(&f->node[idx]), "node %d in after a failed push", idx);
		return;
	}
	FUZZ_CHECK(rc == 0, "push returned %d (n %u cap %u)", rc, f->h.n, f->h.cap);
	FUZZ_CHECK(tmo__heap_contains(&f->node[idx]), "node %d not in after push", idx);
	FUZZ_CHECK(f->node[idx].deadline == deadline, "push did not record the deadline");
	/* After every live timer with deadline <= this one: arm order breaks ties. */
	model_insert(&f->m, (struct model_entry){.idx = idx, .due = deadline, .key = deadline});
}

/* Fire what is due at `now`, as an engine's timer thread would. */
static void advance(struct fuzz_heap *f, int64_t now, int fail)
{
	if (now < f->now)
		now = f->now;
	f->now = now;
	fail_allocs = fail; /* a failing shrink must be harmless */
	for (;;) {
		struct tmo_heap_node *top = tmo__heap_peek(&f->h);
		if (top == NULL || top->deadline > now)
			break;
		struct tmo_heap_node *got = tmo__heap_pop(&f->h);
		FUZZ_CHECK(got == top, "pop returned another node than peek");
		FUZZ_CHECK(f->m.n > 0, "fired node %d but the model is empty", (int)(got - f->node));
		FUZZ_CHECK(got == &f->node[f->m.sorted[0].idx], "fired node %d, model says %d",
		           (int)(got - f->node), f->m.sorted[0].idx);
		FUZZ_CHECK(!tmo__heap_contains(got), "popped node still in");
		model_remove_at(&f->m, 0);
	}
	fail_allocs = 0;
	FUZZ_CHECK(f->m.n == 0 || f->m.sorted[0].due > now,
	           "late: node %d (deadline %lld) not fired at now %lld", f->m.sorted[0].idx,
	           (long long)f->m.sorted[0].due, (long long)now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fuzz_heap f;
	struct fuzz_in in = {data, size, 0};
	uint8_t cfg = fuzz_u8(&in);
	int64_t live_before = tmo_testing_live_allocs();

	memset(&f, 0, sizeof f);
	f.m.on_mismatch = fuzz_model_mismatch;
	tmo_testing_set_fault(fault_hook, NULL);
	unsigned arity = (cfg & 1) ? 4 : 2;
	uint32_t initial_cap = (cfg >> 1) & 7; /* 0 .. 7: growth from tiny arrays */
	FUZZ_CHECK(tmo__heap_init(&f.h, arity, initial_cap) == 0, "init failed");
	for (int i = 0; i < NODES; i++)
		tmo__heap_node_init(&f.node[i]);

	while (fuzz_more(&in)) {
		uint8_t op = fuzz_u8(&in);
		int idx = op % NODES;
		/* op >= NODES (96..255): a clock or fault op; the low bits pick it.
		 * Bytes below 96 and their neighbours arm and cancel. */
		if (op < NODES) {
			uint8_t how = fuzz_u8(&in);
			if (how < 200)
				arm(&f, idx, fuzz_sat_add(f.now, fuzz_delta(&in, 1 + (how & 15))),
				    how >= 180);
			else
				cancel(&f, idx);
		} else {
			switch (op & 3) {
			case 0: {
				int64_t d = fuzz_delta(&in, 1 + (op >> 4));
				advance(&f, fuzz_sat_add(f.now, d < 0 ? -d : d), 0);
				break;
			}
			case 1: /* exactly the next deadline, or one before it */
				if (f.m.n > 0)
					advance(&f, fuzz_sat_add(f.m.sorted[0].due, -((op >> 2) & 1)), 0);
				break;
			case 2: /* pops with every allocation failing */
				advance(&f, f.m.n > 0 ? f.m.sorted[(op >> 2) % f.m.n].due : f.now, 1);
				break;
			default:
				if (f.m.n == 0)
					FUZZ_CHECK(tmo__heap_pop(&f.h) == NULL, "pop of an empty heap");
				advance(&f, f.now, 0);
				break;
			}
		}
		check_state(&f);
	}
	if (cfg & 0x10) {
		/* fini with timers still in: they are the caller's, marked out */
		tmo__heap_fini(&f.h);
		for (int i = 0; i < NODES; i++)
			FUZZ_CHECK(!tmo__heap_contains(&f.node[i]), "node %d in after fini", i);
	} else {
		advance(&f, INT64_MAX, 0);
		check_state(&f);
		FUZZ_CHECK(f.m.n == 0, "%d timers never fired", f.m.n);
		tmo__heap_fini(&f.h);
	}
	tmo_testing_set_fault(NULL, NULL);
	FUZZ_CHECK(tmo_testing_live_allocs() == live_before, "fini left %lld allocations",
	           (long long)(tmo_testing_live_allocs() - live_before));
	return 0;
}
