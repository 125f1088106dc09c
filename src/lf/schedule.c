/*
 * The structures behind a base (schedule.h): the heap over a wheel that
 * mpsc files its timers in (near/far) and the wheels of the wheel engine,
 * each behind struct lf_sched.  The engines in impls/ name one
 * (lf_params.sched); every call runs down from here into src/ds/ and never
 * back up.
 */
#include "lf.h"
#include "schedule.h"

/* ---- heap: exact deadlines, collected in deadline order (near/far's near) ---- */

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

/* ---- near/far: a heap of what comes due soon, over a coarse wheel -----------
 *
 * A heap of every armed timer pays for its size where it hurts: a pop at
 * 1e6 timers sifts through ten levels of four children, each child a node
 * read from anywhere in memory (expiry at 1e6 over 1 s: a quarter of all
 * samples of the run in the timer thread's heap removal, its p99 lateness
 * 7-20 ms).  Here the heap holds only what is due within about a tick
 * (NF_TICK); the rest waits in a wheel of NF_TICK ticks (ds/wheel.h: add
 * and del O(1), a held timeout cancelled long before it is due never
 * reaches the heap) and moves to the heap as its tick comes near.  Pops
 * stay exact: the heap orders by deadline, and what the wheel still holds
 * is due after what the heap gives (far_low).
 *
 * Where a node is: LF_FAR in its aux (node.h), set while in the wheel.
 * Each collect moves, before it pops, every node whose tick ends by
 * now + NF_TICK (at most `max` a call, so that a burst due at one
 * instant moves a batch at a time).  A burst of one instant is then
 * moved whole before its first timer fires (its earliest could be the
 * last one moved): 1e6 due at once wait about 50 ms more for the first
 * callback, and no longer for the last. */

#define NF_TICK TMO_NSEC_PER_MSEC

struct near_far {
	struct tmo_heap near;
	int64_t reached; /* the last time the wheel was advanced to */
	struct tmo_wheel far;
};

static inline int nf_is_far(const struct lf_node *n)
{
	return (atomic_load_explicit(&n->aux, memory_order_relaxed) & LF_FAR) != 0;
}

static inline void nf_set_far(struct lf_node *n, int far)
{
	uintptr_t a = atomic_load_explicit(&n->aux, memory_order_relaxed);
	atomic_store_explicit(&n->aux, far ? a | LF_FAR : a & ~LF_FAR, memory_order_relaxed);
}

static int nf_init(void *s, int64_t resolution_ns, int64_t origin_ns)
{
	(void)resolution_ns;
	struct near_far *f = s;
	f->reached = origin_ns;
	int rc = tmo__wheel_init(&f->far, NF_TICK, origin_ns);
	return rc != 0 ? rc : tmo__heap_init(&f->near, TMO_HEAP_DEFAULT_ARITY, 1024);
}

static void nf_fini(void *s) { h_fini(&((struct near_far *)s)->near); }

/* To the heap when due by the time the wheel was advanced to, or before
 * everything in the heap (a timeout alone, or the new earliest: the
 * timer thread's sleep then ends at its deadline); else to the wheel. */
static int nf_insert(void *s, struct lf_node *n, int64_t deadline)
{
	struct near_far *f = s;
	if (deadline <= f->reached || deadline < h_next(&f->near)) {
		nf_set_far(n, 0);
		return h_insert(&f->near, n, deadline);
	}
	nf_set_far(n, 1);
	tmo__wheel_add(&f->far, &n->s.wheel, deadline);
	return 0;
}

static void nf_remove(void *s, struct lf_node *n)
{
	struct near_far *f = s;
	if (nf_is_far(n))
		tmo__wheel_del(&f->far, &n->s.wheel);
	else
		tmo__heap_remove(&f->near, &n->s.heap);
}

static int nf_contains(const struct lf_node *n)
{
	return nf_is_far(n) ? tmo__wheel_contains(&n->s.wheel) : tmo__heap_contains(&n->s.heap);
}

/* A lower bound on every deadline the wheel holds, given its next_expiry
 * (`next`): a node is due at the first tick boundary at or after its
 * deadline, so one due at next or later has a deadline after next less a
 * tick; what a bounded advance left in a tick it stopped in is at least
 * expired_min. */
static int64_t far_low(const struct near_far *f, int64_t next)
{
	int64_t low = tmo__wheel_expired_min(&f->far);
	if (next != INT64_MAX && next - NF_TICK + 1 < low)
		low = next - NF_TICK + 1;
	return low;
}

static int64_t nf_next(const void *s)
{
	const struct near_far *f = s;
	int64_t low = far_low(f, tmo__wheel_next_expiry(&f->far)), top = h_next(&f->near);
	return top < low ? top : low;
}

/* Move to the heap what the wheel holds due by `to`, at most *max nodes
 * (counted down).  The heap makes room first (a push then cannot fail):
 * when it cannot grow, the rest stays in the wheel, counted in far_low,
 * and moves at a later collect (next_deadline says it is due: the timer
 * thread looks again each round until memory comes back).  Returns 1
 * when the wheel is advanced to `to`. */
static int nf_move(struct near_far *f, int64_t to, size_t *max)
{
	if (to > f->reached)
		f->reached = to;
	struct tmo_heap *h = &f->near;
	while (*max > 0) {
		if (h->n == h->cap && tmo__heap_reserve(h, h->n + 1) != 0)
			return 0;
		size_t ask = h->cap - h->n < *max ? h->cap - h->n : *max;
		struct tmo_wheel_list l = {NULL};
		size_t got = tmo__wheel_advance_max(&f->far, f->reached, ask, &l);
		for (struct tmo_wheel_node *wn = l.head, *next; wn != NULL; wn = next) {
			next = wn->next;
			struct lf_node *n = tmo_container_of(wn, struct lf_node, s.wheel);
			int64_t d = wn->deadline;
			nf_set_far(n, 0);
			(void)h_insert(h, n, d); /* room was made */
		}
		*max -= got;
		if (got < ask)
			return 1;
	}
	return 0;
}

/* In exact deadline order: only what is due before anything the wheel
 * still holds.  Then, when the heap holds nothing before what the wheel
 * holds, the wheel's next tick moves now, however far ahead: the timer
 * thread sleeps until the earliest deadline itself (next_deadline exact),
 * not until a tick before it.  A wheel's next_expiry may be the start of
 * a list a level up; moving to it files that list down, and the next try
 * is tighter (ds/wheel.h): at most TMO_WHEEL_LEVELS + 1 tries. */
static size_t nf_collect(void *s, int64_t now, size_t max,
                         void (*due)(void *ctx, struct lf_node *n), void *ctx)
{
	struct near_far *f = s;
	size_t left = max;
	nf_move(f, now <= INT64_MAX - NF_TICK ? now + NF_TICK : INT64_MAX, &left);
	int64_t next = tmo__wheel_next_expiry(&f->far), low = far_low(f, next);
	size_t k = h_collect(&f->near, low <= now ? low - 1 : now, max, due, ctx);
	/* the pops left the wheel as it was: next and low still hold */
	for (int i = 0; i <= TMO_WHEEL_LEVELS && left > 0; i++) {
		if (low == INT64_MAX || h_next(&f->near) < low || !nf_move(f, next, &left))
			break;
		next = tmo__wheel_next_expiry(&f->far);
		low = far_low(f, next);
	}
	return k;
}

static uint64_t nf_bytes(const void *s) { return h_bytes(&((const struct near_far *)s)->near); }

static uint64_t nf_count(const void *s)
{
	const struct near_far *f = s;
	return h_count(&f->near) + tmo__wheel_count(&f->far);
}

static int64_t nf_deadline(const struct lf_node *n)
{
	return nf_is_far(n) ? n->s.wheel.deadline : n->s.heap.deadline;
}

const struct lf_sched tmo__lf_sched_near_far = {
	.size = sizeof(struct near_far),
	.init = nf_init,
	.fini = nf_fini,
	.insert = nf_insert,
	.remove = nf_remove,
	.contains = nf_contains,
	.next_deadline = nf_next,
	.collect = nf_collect,
	.bytes = nf_bytes,
	.count = nf_count,
	.deadline = nf_deadline,
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
