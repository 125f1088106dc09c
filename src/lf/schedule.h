/* The structure behind a base: a heap over a wheel, or a wheel, behind one
 * table (schedule.c holds both; the engines in impls/ name one of them). */
#ifndef TMO_LF_SCHEDULE_H
#define TMO_LF_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

struct lf_node;

/* Every call is made by the base's holder (its lock, or the timer thread
 * for its own base): no synchronization inside. */
struct lf_sched {
	size_t size; /* bytes of its state */
	/* origin_ns: the engine's time origin (wheels of one engine share a
	 * tick grid).  Returns 0, TMO_EINVAL or TMO_ENOMEM. */
	int (*init)(void *s, int64_t resolution_ns, int64_t origin_ns);
	void (*fini)(void *s);
	/* Returns 0, or TMO_ENOMEM (the node is then not filed). */
	int (*insert)(void *s, struct lf_node *n, int64_t deadline);
	void (*remove)(void *s, struct lf_node *n);
	int (*contains)(const struct lf_node *n);
	/* A lower bound on the earliest deadline; INT64_MAX if empty. */
	int64_t (*next_deadline)(const void *s);
	/* Move the nodes due at `now` out, at most `max` (SIZE_MAX: all), the
	 * earliest first, handing each to due(ctx, n) in deadline order, or
	 * (wheel) in tick order; returns how many.  The timer thread collects
	 * in batches so that a burst of due timers starts firing before the
	 * whole burst is out (fire.c). */
	size_t (*collect)(void *s, int64_t now, size_t max,
	                  void (*due)(void *ctx, struct lf_node *n), void *ctx);
	uint64_t (*bytes)(const void *s); /* beyond its fixed size */
	uint64_t (*count)(const void *s); /* nodes filed */
	int64_t (*deadline)(const struct lf_node *n);
	/* Unordered ones: a lower bound on the deadlines collect() left in a
	 * tick it stopped in (and any other it owes), INT64_MAX if none
	 * (fire.c, collect_base's hold) */
	int64_t (*left_min)(const void *s);
	/* 1: collect() hands out exact deadline order (no sort needed) */
	int ordered;
	/* 1: a struct tmo_wheel of s.wheel nodes; thread_bases requires it
	 * (an owner's filing and cancel call the wheel: lf_own_wheel) */
	int wheel;
};

/* mpsc's: a 4-ary min-heap (ds/heap.h) of what is due within a
 * millisecond or so, over a wheel of 1 ms ticks for the rest (schedule.c,
 * near/far); exact deadlines, collected in deadline order. */
extern const struct lf_sched tmo__lf_sched_near_far;
/* wheel's: hierarchical timing wheels (ds/wheel.h), one tick's nodes in no
 * particular order. */
extern const struct lf_sched tmo__lf_sched_wheel;

#endif
