/*
 * Hierarchical timing wheel of intrusive nodes, usable on its own: the caller
 * supplies `now` (virtual clock in tests and fuzzers), nothing here reads a
 * clock or locks.
 *
 * Levels of 64 slots with a 64-bit occupancy bitmap each; level L slots span
 * 64^L ticks.  add/del are O(1); advance() cascades higher levels down as
 * time passes.  A deadline is rounded UP to a tick boundary, so a node never
 * becomes due before its deadline.  Deadlines beyond the top level wait on an
 * overflow list and are re-filed as the wheel turns: none is lost.
 *
 * Synchronization: none; the owner serializes every call.
 */
#ifndef TMO_WHEEL_H
#define TMO_WHEEL_H

#include <stddef.h>
#include <stdint.h>

/* The one error: the value of TMO_EINVAL (include/tmo/tmo.h; src/core/error.c
 * asserts they agree). */
#define TMO_WHEEL_EINVAL (-11)

#define TMO_WHEEL_BITS 6
#define TMO_WHEEL_SLOTS (1u << TMO_WHEEL_BITS)
#define TMO_WHEEL_LEVELS 8

struct tmo_wheel_node {
	struct tmo_wheel_node *next, **pprev; /* pprev == NULL: not in the wheel */
	int64_t deadline;                     /* ns, as given to add() */
	uint64_t expires;                     /* tick at which it is due */
};

struct tmo_wheel_list {
	struct tmo_wheel_node *head;
};

struct tmo_wheel {
	int64_t resolution_ns;
	uint64_t res_inv;   /* floor((2^64 - 1) / resolution_ns): divide by a multiply */
	int64_t origin_ns;  /* ns of tick 0 */
	uint64_t now_tick;  /* every tick < now_tick has been processed */
	uint64_t count;     /* nodes in the wheel */
	uint64_t occupied[TMO_WHEEL_LEVELS];
	struct tmo_wheel_list slot[TMO_WHEEL_LEVELS][TMO_WHEEL_SLOTS];
	struct tmo_wheel_list overflow; /* beyond the top level, re-filed later */
	uint64_t overflow_min;          /* <= the tick of every overflow node */
	struct tmo_wheel_list expired;  /* added after their tick was processed */
};

/* Returns 0, or TMO_WHEEL_EINVAL for a resolution <= 0. */
int tmo_wheel_init(struct tmo_wheel *w, int64_t resolution_ns, int64_t now_ns);

static inline void tmo_wheel_node_init(struct tmo_wheel_node *n) { n->pprev = NULL; }
static inline int tmo_wheel_contains(const struct tmo_wheel_node *n) { return n->pprev != NULL; }
static inline uint64_t tmo_wheel_count(const struct tmo_wheel *w) { return w->count; }

/* Insert a node that is not in the wheel; deadline in ns on the caller's
 * clock (may be in the past: the node is then due at the next advance).
 * The node is due at the first tick boundary (origin + k * resolution) at
 * or after its deadline. */
void tmo_wheel_add(struct tmo_wheel *w, struct tmo_wheel_node *n, int64_t deadline);
/* Remove a node that is in the wheel. */
void tmo_wheel_del(struct tmo_wheel *w, struct tmo_wheel_node *n);
/* Earliest time (ns) at which advance() may find a due node; INT64_MAX
 * when the wheel is empty (or the time is beyond INT64_MAX).  A lower bound
 * on the next due time (a deadline rounded up to its tick): never later.
 * Exact when the earliest occupied slot holds at most 16 nodes (it is
 * scanned); otherwise that slot's start, and an advance() to it cascades
 * the slot, so calling next_expiry() again gives a later, tighter time: at
 * most TMO_WHEEL_LEVELS + 1 such steps reach a due node.  When a node is
 * already due it is <= the last `now` advanced to.  Cost: one find-first-
 * set per empty level, plus at most 16 nodes read. */
int64_t tmo_wheel_next_expiry(const struct tmo_wheel *w);
/* Advance to `now`, moving every due node out of the wheel onto the end of
 * *due, ordered by tick (nodes of one tick in no particular order).
 * Returns how many.  Exact guarantee, with r = resolution:
 *   never early: a node returned has deadline <= now;
 *   never late:  a node with deadline <= now - (r - 1) is returned (it is
 *                due at origin + ceil((deadline - origin) / r) * r, the
 *                first tick boundary >= its deadline), and so is a node
 *                added after its tick had already been processed.
 * Nodes on *due are linked through `next` and are out of the wheel
 * (tmo_wheel_contains() is false): read `next` before re-adding a node.
 * A `now` earlier than a previous one, or than the `now_ns` given to init
 * (the origin), processes nothing. */
size_t tmo_wheel_advance(struct tmo_wheel *w, int64_t now, struct tmo_wheel_list *due);

#endif
