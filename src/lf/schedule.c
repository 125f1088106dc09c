/*
 * The structures behind a base (schedule.h): the heap mpsc files its timers in
 * and the wheels of the wheel engine, each behind struct lf_sched.  The
 * engines in impls/ name one (lf_params.sched); every call runs down from
 * here into src/ds/ and never back up.
 */
#include "lf.h"
#include "schedule.h"

/* ---- heap: exact deadlines, collected in deadline order ----------------------- */

static int h_init(void *s, int64_t resolution_ns, int64_t origin_ns)
{
	(void)resolution_ns;
	(void)origin_ns;
	return tmo__heap_init(s, TMO_HEAP_DEFAULT_ARITY, 1024);
}

/* The heap's array only: its nodes are the arena's, freed with it, and a
 * forked child's copy may hold a push the parent's timer thread had half
 * done (hooked/lf_fork under TSan, one run of about 150: a NULL slot
 * below n, written through by the walk that marks nodes out). */
static void h_fini(void *s)
{
	struct tmo_heap *h = s;
	h->n = 0;
	tmo__heap_fini(h);
}

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

const struct lf_sched tmo__lf_sched_heap = {
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

/* ---- wheel: deadlines rounded up to the tick, a tick's nodes in any order ----- */

static int w_init(void *s, int64_t resolution_ns, int64_t origin_ns)
{
	return tmo__wheel_init(s, resolution_ns, origin_ns);
}

static void w_fini(void *s) { (void)s; }

static int w_insert(void *s, struct lf_node *n, int64_t deadline)
{
	tmo__wheel_add(s, &n->s.wheel, deadline);
	return 0;
}

static void w_remove(void *s, struct lf_node *n) { tmo__wheel_del(s, &n->s.wheel); }
static int w_contains(const struct lf_node *n) { return tmo__wheel_contains(&n->s.wheel); }
static int64_t w_next(const void *s) { return tmo__wheel_next_expiry(s); }

/* At most max due nodes a call (a burst of 1e6 due in one tick is handed
 * to the timer thread a batch at a time: src/lf/fire.c, collect_base). */
static size_t w_collect(void *s, int64_t now, size_t max,
                        void (*due)(void *ctx, struct lf_node *n), void *ctx)
{
	struct tmo_wheel_list list = {NULL};
	size_t k = tmo__wheel_advance_max(s, now, max, &list);
	for (struct tmo_wheel_node *wn = list.head, *next; wn != NULL; wn = next) {
		next = wn->next;
		due(ctx, tmo_container_of(wn, struct lf_node, s.wheel));
	}
	return k;
}

/* The wheel is fixed-size, allocated with its base: nothing beyond it. */
static uint64_t w_bytes(const void *s)
{
	(void)s;
	return 0;
}

static uint64_t w_count(const void *s) { return tmo__wheel_count(s); }
static int64_t w_left_min(const void *s) { return tmo__wheel_expired_min(s); }
static int64_t w_deadline(const struct lf_node *n) { return n->s.wheel.deadline; }

const struct lf_sched tmo__lf_sched_wheel = {
	.size = sizeof(struct tmo_wheel),
	.init = w_init,
	.fini = w_fini,
	.insert = w_insert,
	.remove = w_remove,
	.contains = w_contains,
	.next_deadline = w_next,
	.collect = w_collect,
	.bytes = w_bytes,
	.count = w_count,
	.deadline = w_deadline,
	.left_min = w_left_min,
	.ordered = 0, /* one tick's nodes come out in no particular order */
	.wheel = 1,
};
