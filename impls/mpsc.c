/*
 * mpsc: lock-free arm and cancel through a Concurrency Kit inbox to one
 * timer thread that owns a 4-ary min-heap (src/heap.h).
 *
 * The core (src/inbox.c) does the work: engine-owned nodes from slabs and
 * thread-local caches, a CAS-decided state word per node, a relative timeout
 * stamped by the timer thread (arm reads no clock), prompt removal of a
 * cancelled node (the canceller pushes it back through the inbox).  This file
 * only adapts the heap to the core's structure interface.
 *
 * The timer thread sleeps until the next deadline and a push onto an empty
 * inbox wakes it (an event count: one atomic add unless it sleeps); while
 * arms keep coming it polls the inbox every 50 us instead, so producers pay
 * no wake-up.  The resolution is the thread's wake-up latency, about 50 us
 * on a shared 2-core machine (expiry --quick: lateness p50 50-80 us), plus
 * the time callbacks ahead of it take.
 */
#include "inbox.h"

static int h_init(void *s, int64_t resolution_ns, int64_t now_ns)
{
	(void)resolution_ns;
	(void)now_ns;
	/* 4-ary (the heap helper's measured winner); reserve one slab's worth */
	return tmo_heap_init(s, 4, 1024);
}

static void h_fini(void *s) { tmo_heap_fini(s); }

static int h_insert(void *s, struct tmo__ib_node *n, int64_t deadline)
{
	tmo_heap_node_init(&n->s.heap);
	return tmo_heap_push(s, &n->s.heap, deadline);
}

static void h_remove(void *s, struct tmo__ib_node *n) { tmo_heap_remove(s, &n->s.heap); }

static int64_t h_next(const void *s)
{
	const struct tmo_heap_node *top = tmo_heap_peek(s);
	return top != NULL ? top->deadline : INT64_MAX;
}

static void h_collect(void *s, int64_t now, void (*due)(void *ctx, struct tmo__ib_node *n),
                      void *ctx)
{
	struct tmo_heap_node *top;
	while ((top = tmo_heap_peek(s)) != NULL && top->deadline <= now) {
		tmo_heap_pop(s);
		due(ctx, tmo_container_of(top, struct tmo__ib_node, s.heap));
	}
}

static uint64_t h_bytes(const void *s) { return tmo_heap_bytes(s); }
static uint64_t h_count(const void *s) { return tmo_heap_size(s); }

static const struct tmo__ib_sched heap_sched = {
	.size = sizeof(struct tmo_heap),
	.init = h_init,
	.fini = h_fini,
	.insert = h_insert,
	.remove = h_remove,
	.next_deadline = h_next,
	.collect = h_collect,
	.bytes = h_bytes,
	.count = h_count,
};

#define MPSC_RESOLUTION_NS (50 * TMO_NSEC_PER_USEC)

static int mpsc_create(const struct tmo_config *cfg, struct tmo **out);

const struct tmo_engine_ops tmo_engine_mpsc = {
	.name = "mpsc",
	.summary = "lock-free CK inbox (engine-owned nodes, CAS state word, arm dated by "
	           "the TSC) to one timer thread owning a 4-ary heap; resolution = thread "
	           "wake-up latency (~50 us idle, more under load)",
	.caps = TMO_CAP_LOCKFREE_ARM | TMO_CAP_NO_SYSCALL | TMO_CAP_NO_ALLOC | TMO_CAP_PARK,
	.resolution_ns = MPSC_RESOLUTION_NS,
	.create = mpsc_create,
	.destroy = tmo__ib_destroy,
	.arm = tmo__ib_arm,
	.cancel = tmo__ib_cancel,
	.stats = tmo__ib_stats,
	.park = tmo__ib_park,
};

static int mpsc_create(const struct tmo_config *cfg, struct tmo **out)
{
	static const struct tmo__ib_params params = {
		.ops = &tmo_engine_mpsc,
		.sched = &heap_sched,
		.resolution_ns = MPSC_RESOLUTION_NS,
		/* poll while busy: waking a thread that fell asleep after every
		 * push made each arm a futex syscall (~300 ns/pair, measured), a
		 * state a flat-out producer could get stuck in */
		.nap_ns = MPSC_RESOLUTION_NS,
	};
	return tmo__ib_create(&params, cfg, out);
}
