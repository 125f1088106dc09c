/*
 * mpsc: lock-free arm and cancel (src/lf/), one timer thread owning a 4-ary
 * min-heap (src/ds/heap.h) fed through a Concurrency Kit inbox.
 *
 * An arm is held in its thread's ring, where the same thread's cancel takes
 * it back with one CAS (the seed's arm+cancel never leaves its core); the
 * timer thread steals what could come due before it looks again, and a ring
 * slot needed while its arm is still pending sends that arm through the
 * inbox.  Every arm is dated by the TSC (precise: no tick), so the heap keeps
 * exact deadlines; the resolution is the timer thread's wake-up latency,
 * about 50 us on a shared 2-core machine, plus the time callbacks ahead of
 * it take.  While arms keep coming the timer thread polls every 50 us
 * instead of being woken.
 */
#include "lf/lf.h"

static int h_init(void *s, int64_t resolution_ns, int64_t origin_ns)
{
	(void)resolution_ns;
	(void)origin_ns;
	return tmo__heap_init(s, TMO_HEAP_DEFAULT_ARITY, 1024);
}

static void h_fini(void *s) { tmo__heap_fini(s); }

static int h_insert(void *s, struct lf_node *n, int64_t deadline)
{
	tmo__heap_node_init(&n->s.heap);
	return tmo__heap_push(s, &n->s.heap, deadline);
}

static void h_remove(void *s, struct lf_node *n) { tmo__heap_remove(s, &n->s.heap); }
static int h_contains(const struct lf_node *n) { return tmo__heap_contains(&n->s.heap); }

static int64_t h_next(const void *s)
{
	const struct tmo_heap_node *top = tmo__heap_peek(s);
	return top != NULL ? top->deadline : INT64_MAX;
}

static size_t h_collect(void *s, int64_t now, size_t max,
                        void (*due)(void *ctx, struct lf_node *n), void *ctx)
{
	struct tmo_heap_node *top;
	size_t k = 0;
	while (k < max && (top = tmo__heap_peek(s)) != NULL && top->deadline <= now) {
		tmo__heap_pop(s);
		due(ctx, tmo_container_of(top, struct lf_node, s.heap));
		k++;
	}
	return k;
}

static uint64_t h_bytes(const void *s) { return tmo__heap_bytes(s); }
static uint64_t h_count(const void *s) { return tmo__heap_size(s); }
static int64_t h_deadline(const struct lf_node *n) { return n->s.heap.deadline; }

static const struct lf_sched heap_sched = {
	.size = sizeof(struct tmo_heap),
	.init = h_init,
	.fini = h_fini,
	.insert = h_insert,
	.remove = h_remove,
	.contains = h_contains,
	.next_deadline = h_next,
	.collect = h_collect,
	.bytes = h_bytes,
	.count = h_count,
	.deadline = h_deadline,
	.ordered = 1,
};

#define MPSC_RESOLUTION_NS (50 * TMO_NSEC_PER_USEC)

static int mpsc_create(const struct tmo_config *cfg, struct tmo **out);

const struct tmo_engine_ops tmo__engine_mpsc = {
	.name = "mpsc",
	.summary = "lock-free arm/cancel (per-thread rings: a thread's cancel takes its own arm "
	           "back with one CAS), arms dated by the TSC, a CK inbox to one timer thread "
	           "owning a 4-ary heap; resolution = thread wake-up latency (~50 us)",
	.caps = TMO_CAP_LOCKFREE_ARM | TMO_CAP_NO_SYSCALL | TMO_CAP_NO_ALLOC | TMO_CAP_PARK,
	.resolution_ns = MPSC_RESOLUTION_NS,
	.create = mpsc_create,
	LF_ENGINE_OPS,
};

static int mpsc_create(const struct tmo_config *cfg, struct tmo **out)
{
	static const struct lf_params params = {
		.ops = &tmo__engine_mpsc,
		.sched = &heap_sched,
		.resolution_ns = MPSC_RESOLUTION_NS,
		.tick_ns = 0, /* looks every resolution_ns while arms come */
		.thread_bases = 0,
	};
	return tmo__lf_create(&params, cfg, out);
}
