/*
 * The wheel's primitives (src/ds/wheel.c is their one user): time in ticks,
 * the intrusive lists and their ways, a level's blocks and the bitmaps of
 * occupied slots, a tick's level and slot.  See wheel.c for Placement and Ways.
 */
#ifndef TMO_WHEEL_PRIM_H
#define TMO_WHEEL_PRIM_H

#include <stdint.h>

#include "ds/wheel.h"

#define LEVEL_SHIFT(l) ((unsigned)(l) * TMO_WHEEL_BITS)
#define SLOT_MASK ((uint64_t)TMO_WHEEL_SLOTS - 1)
#define RING (2u * TMO_WHEEL_SLOTS)
#define RING_MASK ((uint64_t)RING - 1)

/* ---- time conversion ------------------------------------------------------ */

/* Exact distance b - a for b >= a, even across the whole int64 range. */
static inline uint64_t udiff(int64_t b, int64_t a) { return (uint64_t)b - (uint64_t)a; }

/* d / r and d % r without a divide instruction (it sits on the add path, and
 * a 64-bit divide costs several times a multiply; measured: a hot del+add
 * pair 10.1 ns with the divide, 5.3 ns without).  With inv = floor((2^64 - 1)
 * / r), q = high half of d * inv satisfies d/r - 2 < q <= d/r, so at most
 * two corrections make it exact, for every d < 2^64 and every r >= 1. */
static inline uint64_t div_res(const struct tmo_wheel *w, uint64_t d, uint64_t *rem)
{
	uint64_t r = (uint64_t)w->resolution_ns;
	uint64_t q = (uint64_t)(((unsigned __int128)d * w->res_inv) >> 64);
	uint64_t m = d - q * r;
	while (m >= r) {
		q++;
		m -= r;
	}
	*rem = m;
	return q;
}

/* Start of tick t in ns, saturated at INT64_MAX (a time advance() can never
 * reach anyway). */
static inline int64_t tick_ns(const struct tmo_wheel *w, uint64_t t)
{
	uint64_t span;
	if (__builtin_mul_overflow(t, (uint64_t)w->resolution_ns, &span) ||
	    span > udiff(INT64_MAX, w->origin_ns))
		return INT64_MAX;
	return (int64_t)((uint64_t)w->origin_ns + span);
}

/* ---- intrusive lists (hlist style: pprev points at whoever points at us) -- */

static inline void head_push(struct tmo_wheel_node **h, struct tmo_wheel_node *n)
{
	n->next = *h;
	if (n->next)
		n->next->pprev = &n->next;
	*h = n;
	n->pprev = h;
}

static inline void list_push(struct tmo_wheel_list *l, struct tmo_wheel_node *n)
{
	head_push(&l->head, n);
}

/* Into the way of the 256 KiB of memory the node lies in (Ways, below). */
static inline void ways_push(struct tmo_wheel_slot *sl, struct tmo_wheel_node *n)
{
	head_push(&sl->head[((uintptr_t)n >> TMO_WHEEL_WAY_SHIFT) & (TMO_WHEEL_WAYS - 1)], n);
}

/* A walk of a slot's ways that takes a node of each in turn, from the
 * heads (wheel.c, Ways): ways_take() unlinks the next one (NULL: all are
 * empty) and leaves the heads' pprev for ways_mend() to set once the walk
 * is over.  It asks for the line of the node behind the one it takes: the
 * next take of that way reads it, and each way then has two misses in
 * flight, not one.  Without it a walk was slower than the one before it,
 * whose store to that node's pprev at each take did the same: at 1e5
 * random deadlines, medians of 74.4 and 82.8 ns a node against 54.9 and
 * 53.9 (collect.c of results/2026-12-07-epyc2-d683398). */
struct ways_walk {
	struct tmo_wheel_slot *sl;
	unsigned j; /* the way whose turn is next */
};

static inline struct tmo_wheel_node *ways_take(struct ways_walk *it)
{
	for (unsigned k = 0; k < TMO_WHEEL_WAYS; k++) {
		unsigned j = (it->j + k) & (TMO_WHEEL_WAYS - 1);
		struct tmo_wheel_node *n = it->sl->head[j];
		if (n != NULL) {
			it->sl->head[j] = n->next;
			__builtin_prefetch(n->next, 1);
			it->j = j + 1;
			return n;
		}
	}
	return NULL;
}

/* Each way's first node points back at its head (after a walk, or once
 * the ways moved to another slot). */
static inline void ways_mend(struct tmo_wheel_slot *sl)
{
	for (unsigned j = 0; j < TMO_WHEEL_WAYS; j++)
		if (sl->head[j] != NULL)
			sl->head[j]->pprev = &sl->head[j];
}

/* Take the whole list; the nodes keep stale pprev values until re-linked. */
static inline struct tmo_wheel_node *list_take(struct tmo_wheel_list *l)
{
	struct tmo_wheel_node *h = l->head;
	l->head = NULL;
	return h;
}

/* ---- blocks and slots ---------------------------------------------------------- */

/* The block of tick t at level l: t's digits above l. */
static inline uint64_t block_of(uint64_t t, unsigned l) { return t >> LEVEL_SHIFT(l + 1); }

/* First tick of block b of level l, or UINT64_MAX when it lies beyond the
 * last tick (then no node can be in it). */
static inline uint64_t block_start(uint64_t b, unsigned l)
{
	unsigned sh = LEVEL_SHIFT(l + 1);
	return b > (UINT64_MAX >> sh) ? UINT64_MAX : b << sh;
}

static inline void slot_mark(struct tmo_wheel *w, unsigned l, unsigned s)
{
	w->occupied[l][s >> TMO_WHEEL_BITS] |= UINT64_C(1) << (s & SLOT_MASK);
}

/* Slot s of level l is empty, or about to be taken whole. */
static inline void slot_unmark(struct tmo_wheel *w, unsigned l, unsigned s)
{
	tmo__wheel_unmark(w, l, s);
}

/* level(e) of Placement (wheel.c, at the top), for e >= t = now_tick; or
 * TMO_WHEEL_LEVELS: beyond the top level (the overflow list). */
static inline unsigned level_of(uint64_t e, uint64_t t)
{
	unsigned l = 0;
	while (l < TMO_WHEEL_LEVELS && block_of(e, l) - block_of(t, l) > 1)
		l++;
	return l;
}

/* Put n in slot(e) of level l < TMO_WHEEL_LEVELS; level 0 reads
 * n->deadline (min0). */
static inline void put(struct tmo_wheel *w, struct tmo_wheel_node *n, uint64_t e, unsigned l)
{
	unsigned s = (unsigned)((e >> LEVEL_SHIFT(l)) & RING_MASK);
	if (l < TMO_WHEEL_WAYS_LEVELS)
		ways_push(&w->slot[l][s], n);
	else
		head_push(&w->slot_up[l - TMO_WHEEL_WAYS_LEVELS][s], n);
	slot_mark(w, l, s);
	if (l > 0 && w->placed[l - 1][s] != UINT32_MAX)
		w->placed[l - 1][s]++;
	else if (l == 0 && n->deadline < w->min0[s])
		w->min0[s] = n->deadline;
}

#endif /* TMO_WHEEL_PRIM_H */
