/*
 * Hierarchical timing wheel of intrusive nodes, usable on its own: the caller
 * supplies `now` (virtual clock in tests and fuzzers), nothing here reads a
 * clock or locks.
 *
 * Levels of 64 slots, each kept twice (the block of 64 slots the current
 * tick is in, and the next); level L slots span 64^L ticks.  add/del are
 * O(1).  As time passes each level's next block is filled from the level
 * above a share per tick, so advance() never re-files a whole slot at once
 * while ticks go by one by one.  A deadline is rounded UP to a tick
 * boundary, so a node never becomes due before its deadline.  Deadlines
 * beyond the top level wait on an overflow list and are re-filed as the
 * wheel turns: none is lost.
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

/* A slot of the lowest TMO_WHEEL_WAYS_LEVELS levels (and a pending list,
 * and `expired`) is TMO_WHEEL_WAYS lists, filled in turn and walked in
 * turn: the walks that move those nodes a level down or hand them out
 * chase TMO_WHEEL_WAYS pointers at once rather than one, so their cache
 * misses overlap (wheel.c, Ways).  The levels above keep one list a slot:
 * few timers wait there long enough to be moved down, and their slots
 * would cost 3 KiB a level more. */
#define TMO_WHEEL_WAYS 4
#define TMO_WHEEL_WAYS_LEVELS 2
/* A node's way: that of the 2^TMO_WHEEL_WAY_SHIFT bytes of memory it lies
 * in, (address >> TMO_WHEEL_WAY_SHIFT) % TMO_WHEEL_WAYS. */
#define TMO_WHEEL_WAY_SHIFT 18
struct tmo_wheel_slot {
	struct tmo_wheel_node *head[TMO_WHEEL_WAYS];
};

/* No node in any of the slot's ways. */
static inline int tmo__wheel_slot_empty(const struct tmo_wheel_slot *sl)
{
	uintptr_t any = 0;
	for (unsigned j = 0; j < TMO_WHEEL_WAYS; j++)
		any |= (uintptr_t)sl->head[j];
	return any == 0;
}

struct tmo_wheel {
	int64_t resolution_ns;
	uint64_t res_inv;   /* floor((2^64 - 1) / resolution_ns): divide by a multiply */
	int64_t origin_ns;  /* ns of tick 0 */
	uint64_t now_tick;  /* every tick < now_tick has been processed */
	uint64_t count;     /* nodes in the wheel */
	uint64_t refiled;   /* nodes moved to another list, in all */
	/* Level L, slot (tick >> 6L) & 127: the two halves hold two
	 * consecutive blocks of 64 (wheel.c, Placement); slot_up[L - 2] for
	 * the levels above TMO_WHEEL_WAYS_LEVELS, right after `slot` (del()
	 * tells a slot's head by one address range over both). */
	uint64_t occupied[TMO_WHEEL_LEVELS][2];
	struct tmo_wheel_slot slot[TMO_WHEEL_WAYS_LEVELS][2 * TMO_WHEEL_SLOTS];
	struct tmo_wheel_node *slot_up[TMO_WHEEL_LEVELS - TMO_WHEEL_WAYS_LEVELS][2 * TMO_WHEEL_SLOTS];
	/* placed[L - 1][s]: nodes put in slot s of level L since it was last
	 * taken (del does not count down: an upper bound on its length;
	 * UINT32_MAX: at least that many).  Not 16 bits: a million timers
	 * over a second put 67,163 in one slot of level 1, and a count
	 * stuck at its top let the whole wheel's count size the shares:
	 * 12,000 nodes re-filed a tick, a 4.5 ms stall. */
	uint32_t placed[TMO_WHEEL_LEVELS - 1][2 * TMO_WHEEL_SLOTS];
	/* pending[L]: the next block of level L, taken from level L + 1 and
	 * moved down a share per tick; pending_left bounds its length */
	struct tmo_wheel_slot pending[TMO_WHEEL_LEVELS - 1];
	uint64_t pending_left[TMO_WHEEL_LEVELS - 1];
	struct tmo_wheel_list overflow; /* beyond the top level, re-filed later */
	uint64_t overflow_min;          /* <= the tick of every overflow node */
	struct tmo_wheel_slot expired;  /* added after their tick was processed,
	                                   and the rest of a split tick */
	uint64_t expired_tick;          /* <= the tick of every expired node */
	int64_t expired_min;            /* <= the deadline of every expired
	                                   node; INT64_MAX when none */
	/* <= the deadline of every node put in level 0's slot s since it was
	 * last empty; INT64_MAX when none: what a bounded advance that stops
	 * inside the slot's tick leaves, known without walking the rest */
	int64_t min0[2 * TMO_WHEEL_SLOTS];
};

/* Returns 0, or TMO_WHEEL_EINVAL for a resolution <= 0. */
int tmo__wheel_init(struct tmo_wheel *w, int64_t resolution_ns, int64_t now_ns);

static inline void tmo__wheel_node_init(struct tmo_wheel_node *n) { n->pprev = NULL; }
static inline int tmo__wheel_contains(const struct tmo_wheel_node *n) { return n->pprev != NULL; }
static inline uint64_t tmo__wheel_count(const struct tmo_wheel *w) { return w->count; }
/* A lower bound on the deadline of every node on `expired` (what a bounded
 * advance left of a tick it stopped in, and nodes added late), INT64_MAX
 * when there are none: what the rest of a split tick may hold. */
static inline int64_t tmo__wheel_expired_min(const struct tmo_wheel *w) { return w->expired_min; }
/* How many times a node has been moved from one list to another by
 * advance() (a level down, or off the overflow list): the work time costs. */
static inline uint64_t tmo__wheel_refiled(const struct tmo_wheel *w) { return w->refiled; }

/* Insert a node that is not in the wheel; deadline in ns on the caller's
 * clock (may be in the past: the node is then due at the next advance).
 * The node is due at the first tick boundary (origin + k * resolution) at
 * or after its deadline. */
void tmo__wheel_add(struct tmo_wheel *w, struct tmo_wheel_node *n, int64_t deadline);
/* tmo__wheel_add, given `near`, a time known before the deadline and most
 * often in the same slot as it (the lock-free engines: a time at hand
 * plus the timeout, arm.c file_own): the node's place is worked
 * out from near while the deadline is still being computed, and then
 * checked against it, so that the list and bitmap writes do not wait for
 * the deadline (a TSC read and its conversion: docs/lockfree.md, Where an
 * arm goes, gives what it saves).  Any near gives the same wheel; one in
 * another slot costs a second placement.  A near at level 0 (a slot a
 * tick), in the past or beyond the top level: placed from the deadline. */
void tmo__wheel_add_near(struct tmo_wheel *w, struct tmo_wheel_node *n, int64_t deadline,
                         int64_t near);
/* Slot s of level l is empty, or about to be taken whole (wheel.c). */
static inline void tmo__wheel_unmark(struct tmo_wheel *w, unsigned l, unsigned s)
{
	w->occupied[l][s >> TMO_WHEEL_BITS] &= ~(UINT64_C(1) << (s & (TMO_WHEEL_SLOTS - 1)));
	if (l > 0)
		w->placed[l - 1][s] = 0;
	else
		w->min0[s] = INT64_MAX;
}

/* Remove a node that is in the wheel.  Inline: a cancel's whole cost is
 * a few of its instructions, and the call would be a good share. */
static inline void tmo__wheel_del(struct tmo_wheel *w, struct tmo_wheel_node *n)
{
	struct tmo_wheel_node **pprev = n->pprev;
	*pprev = n->next;
	if (n->next)
		n->next->pprev = pprev;
	/* The slot became empty iff we were the only node of its way (pprev
	 * is then a head of the slot and nothing followed us) and its other
	 * ways are empty.  Recognise a slot's head by its address, so no
	 * level/slot index has to be stored in the node: one range test over
	 * `slot` and `slot_up`, which follows it, for the most common case, a
	 * node whose pprev is another node's `next`. */
	uintptr_t off = (uintptr_t)pprev - (uintptr_t)&w->slot[0][0];
	if (n->next == NULL && off < sizeof w->slot + sizeof w->slot_up) {
		size_t i;
		int empty = 1;
		if (off < sizeof w->slot) {
			i = off / sizeof(struct tmo_wheel_slot);
			empty = tmo__wheel_slot_empty(&w->slot[0][0] + i);
#ifdef TMO_WHEEL_PLANT_ONE_WAY /* tests/unit/wheel.cmake: unit/wheel must catch it */
			empty = 1; /* as if the slot's other ways were empty */
#endif
		} else {
			i = (off - sizeof w->slot) / sizeof(struct tmo_wheel_node *) +
			    TMO_WHEEL_WAYS_LEVELS * 2 * TMO_WHEEL_SLOTS;
		}
		if (empty)
			tmo__wheel_unmark(w, (unsigned)(i / (2 * TMO_WHEEL_SLOTS)),
			                  (unsigned)(i % (2 * TMO_WHEEL_SLOTS)));
	}
	n->next = NULL;
	n->pprev = NULL;
	w->count--;
}
/* Earliest time (ns) at which advance() may find a due node; INT64_MAX
 * when the wheel is empty (or the time is beyond INT64_MAX).  A lower bound
 * on the next due time (a deadline rounded up to its tick): never later.
 * Exact when the earliest nodes are in a slot of level 0, or in a list of
 * at most 16 nodes (it is scanned); otherwise that list's start, and an
 * advance() to it files the list a level down, so calling next_expiry()
 * again gives a later, tighter time: at most TMO_WHEEL_LEVELS + 1 such
 * steps reach a due node.  When a node is already due it is <= the last
 * `now` advanced to.  Cost: a few find-first-sets per empty level, plus at
 * most 32 nodes read. */
int64_t tmo__wheel_next_expiry(const struct tmo_wheel *w);
/* Advance to `now`, moving every due node out of the wheel onto the end of
 * *due, ordered by tick (nodes of one tick in no particular order).
 * Returns how many.  Exact guarantee, with r = resolution:
 *   never early: a node returned has deadline <= now;
 *   never late:  a node with deadline <= now - (r - 1) is returned (it is
 *                due at origin + ceil((deadline - origin) / r) * r, the
 *                first tick boundary >= its deadline), and so is a node
 *                added after its tick had already been processed.
 * Nodes on *due are linked through `next` and are out of the wheel
 * (tmo__wheel_contains() is false): read `next` before re-adding a node.
 * A `now` earlier than a previous one, or than the `now_ns` given to init
 * (the origin), processes nothing.  Cost: the nodes handed out, plus, for
 * each tick passed, a share of the next blocks' nodes filed a level down
 * (about 64/63 of the nodes due per tick, per level; a jump past ticks
 * where nothing was due files what it skipped at once). */
size_t tmo__wheel_advance_max(struct tmo_wheel *w, int64_t now, size_t max,
                              struct tmo_wheel_list *due);
static inline size_t tmo__wheel_advance(struct tmo_wheel *w, int64_t now,
                                        struct tmo_wheel_list *due)
{
	return tmo__wheel_advance_max(w, now, SIZE_MAX, due);
}
/* advance() that hands out at most max nodes (max >= 1): a burst due at
 * once comes out a batch at a time.  When it stops inside a tick, that
 * tick counts as processed and its other nodes wait on `expired`, handed
 * out first by the next call; next_expiry() is then the tick's time, so
 * the caller knows the rest is due and no later than what it was given.
 * Ticks after it are not processed until the next call.  The guarantee of
 * advance() holds for what it returns (never early, tick order for the
 * nodes filed before their tick); never late holds over the calls that
 * follow, the first of which returns fewer than max.  Cost: the nodes
 * handed out, plus advance()'s per tick; a stop inside a tick walks what
 * was already on `expired` (nodes added late: few), not the tick's rest
 * (its least deadline is kept as nodes are put in the slot: min0). */

#endif
