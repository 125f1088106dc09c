/*
 * Hierarchical timing wheel, see wheel.h.
 *
 * Placement.  Time is counted in ticks from origin_ns; `now_tick` (T below)
 * is the first tick not yet processed.  The block of a tick e at level L
 * is B_L(e) = e >> 6(L + 1): the 64 level-L slots that one level-(L + 1)
 * slot spans.  A node due at tick e >= T lives at the lowest level L whose
 * block is T's or the next one, in the slot given by e's digit at L and
 * the parity of its block:
 *
 *     level(e) = min { L : B_L(e) - B_L(T) <= 1 }
 *     slot(e)  = (e >> 6 * level) & 127
 *
 * The two halves of a level's 128 slots are a ring of two blocks: the
 * current one and the next.  Two consequences the code relies on:
 *   - every node of a level is due before every node of a higher one, and
 *     within a level the current block's half comes before the next
 *     block's, so the first occupied slot of the lowest non-empty level
 *     bounds the next due tick;
 *   - when T enters a new block at level L, the nodes of the block after it
 *     (which placement now puts at level L) are exactly one slot of level
 *     L + 1.  That slot is taken whole onto pending[L] and moved down a
 *     share at each tick T passes, so that it is empty by the time T enters
 *     the last level-L slot of its block (`deadline` below), when the level
 *     below needs its first slot.  The share is what is left (bounded by
 *     `placed`, counted as nodes are put in the slot) over the ticks left.
 *     A jump of T past a whole block (nothing was due in it) files what it
 *     skipped at once.
 * Nodes whose block at the top level is beyond the next wait on the
 * overflow list; it is re-filed whenever T enters a new top-level epoch.
 * A node added with a tick already processed (e < T) waits on `expired`
 * and is handed out by the next advance().
 *
 * Costs.  add/del O(1).  advance() jumps over empty stretches with the
 * bitmaps (a jump of 2^40 ticks costs as little as a jump of 1), and each
 * node is re-filed at most once per level on its way down, plus once per
 * top-level epoch while on the overflow list; while T steps tick by tick,
 * a tick's share of that is what is pending over the ticks left for it.
 */
#include <stddef.h>
#include <string.h>

#include "ds/wheel.h"
#include "ds/wheel_prim.h"

/* Levels with a pending list: all but the top, whose next block comes from
 * the overflow list. */
#define PACED (TMO_WHEEL_LEVELS - 1)
/* next_expiry() reads at most this many nodes of a higher-level slot to
 * return an exact time (bounded: it must stay cheap). */
#define NEXT_EXPIRY_SCAN 16u
/* Ticks covered by all levels together: the top-level epoch. */
#define EPOCH_SHIFT LEVEL_SHIFT(TMO_WHEEL_LEVELS)

_Static_assert(TMO_WHEEL_SLOTS == 64, "one uint64_t bitmap per level");
_Static_assert(EPOCH_SHIFT < 64, "levels must leave room for the epoch");
_Static_assert(RING == 128, "a level's slot: its digit and its block's parity");
_Static_assert((TMO_WHEEL_WAYS & (TMO_WHEEL_WAYS - 1)) == 0, "ways: a power of two");
_Static_assert(offsetof(struct tmo_wheel, slot_up) ==
                   offsetof(struct tmo_wheel, slot) + sizeof(((struct tmo_wheel *)0)->slot),
               "del() tells a slot's head by one range over slot and slot_up");

int tmo__wheel_init(struct tmo_wheel *w, int64_t resolution_ns, int64_t now_ns)
{
	if (w == NULL || resolution_ns <= 0)
		return TMO_WHEEL_EINVAL;
	memset(w, 0, sizeof *w); /* every list empty, every count 0 */
	w->resolution_ns = resolution_ns;
	w->res_inv = UINT64_MAX / (uint64_t)resolution_ns;
	w->origin_ns = now_ns;
	w->overflow_min = UINT64_MAX;
	w->expired_tick = UINT64_MAX;
	w->expired_min = INT64_MAX;
	for (unsigned s = 0; s < RING; s++)
		w->min0[s] = INT64_MAX;
	return 0;
}

/* ---- placement -------------------------------------------------------------- */

/* First tick whose start is >= deadline: rounding up is what makes "never
 * early" hold.  Deadlines at or before the origin map to tick 0. */
static inline uint64_t tick_ceil(const struct tmo_wheel *w, int64_t deadline)
{
	if (deadline <= w->origin_ns)
		return 0;
	uint64_t rem, q = div_res(w, udiff(deadline, w->origin_ns), &rem);
	return q + (rem != 0);
}

/* Put n where its tick belongs (see Placement at the top): on `expired` when
 * already processed, on `overflow` beyond the top level, else in its slot. */
static void place(struct tmo_wheel *w, struct tmo_wheel_node *n)
{
	uint64_t e = n->expires, t = w->now_tick;
	if (e < t) {
		ways_push(&w->expired, n);
		if (e < w->expired_tick)
			w->expired_tick = e;
		if (n->deadline < w->expired_min)
			w->expired_min = n->deadline;
		return;
	}
	unsigned l = level_of(e, t);
	if (l < TMO_WHEEL_LEVELS) {
		put(w, n, e, l);
		return;
	}
	list_push(&w->overflow, n);
	if (e < w->overflow_min)
		w->overflow_min = e;
}

/* Ways.  A slot of the lowest TMO_WHEEL_WAYS_LEVELS levels links its nodes
 * in TMO_WHEEL_WAYS lists, and every walk of such a slot (moved onto a
 * pending list, or handed out), of a pending list and of `expired` takes a
 * node of each way in turn.  Timers due together are most often armed at
 * different times, so their nodes lie anywhere in memory: with many timers
 * each node a walk reaches is a cache miss, and a walk of one list learns
 * the next address only when that miss is over.  Independent chains let
 * TMO_WHEEL_WAYS misses overlap.  A node's way is that of the 256 KiB of
 * memory it lies in, not a turn: nodes armed one after another from
 * memory in order (a burst due at one instant) stay in one way in runs of
 * thousands, and a walk of each way reads them in memory order, which the
 * hardware prefetcher follows (turns cost such a walk 2-3 times its time).
 * docs/lockfree.md, The timer thread, gives what the ways save.  Adding
 * and deleting cost what they did with one list, but for the few
 * instructions that pick the way and that tell a slot empty. */

/* Move up to k nodes off sl's ways, a node of each in turn, to where they
 * now belong; the nodes left keep valid pprev values.  Returns how many
 * moved. */
static uint64_t ways_move(struct tmo_wheel *w, struct tmo_wheel_slot *sl, uint64_t k)
{
	struct ways_walk it = {sl, 0};
	uint64_t moved = 0;
	struct tmo_wheel_node *n;
	while (moved < k && (n = ways_take(&it)) != NULL) {
		place(w, n);
		moved++;
	}
	ways_mend(sl);
	w->refiled += moved;
	return moved;
}

static void refile_chain(struct tmo_wheel *w, struct tmo_wheel_node *n)
{
	while (n) {
		struct tmo_wheel_node *next = n->next;
		place(w, n);
		w->refiled++;
		n = next;
	}
}

void tmo__wheel_add(struct tmo_wheel *w, struct tmo_wheel_node *n, int64_t deadline)
{
	n->deadline = deadline;
	n->expires = tick_ceil(w, deadline);
	place(w, n);
	w->count++;
}

/* Placed from near's tick (wheel.h): at level 1 and up a slot holds many
 * ticks.  The check: e at least that tick (level(e) only grows with e) and
 * in its slot of that level; else e is placed again (the first slot keeps
 * one more in `placed`, an upper bound anyway). */
void tmo__wheel_add_near(struct tmo_wheel *w, struct tmo_wheel_node *n, int64_t deadline,
                         int64_t near)
{
	uint64_t e0 = tick_ceil(w, near), t = w->now_tick;
	unsigned l = e0 >= t ? level_of(e0, t) : 0;
	if (l == 0 || l == TMO_WHEEL_LEVELS) { /* one tick a slot, or the overflow */
		tmo__wheel_add(w, n, deadline);
		return;
	}
	put(w, n, e0, l); /* level >= 1: reads no deadline */
	w->count++;
	uint64_t e = tick_ceil(w, deadline);
	n->deadline = deadline;
	n->expires = e;
#ifndef TMO_WHEEL_PLANT_NEAR_TRUSTED /* tests/unit/wheel.cmake: unit/wheel must catch it */
	if (__builtin_expect(e < e0 || (e >> LEVEL_SHIFT(l)) != (e0 >> LEVEL_SHIFT(l)), 0)) {
		tmo__wheel_del(w, n); /* leaves deadline and expires */
		place(w, n);
		w->count++;
	}
#endif
}

/* tmo__wheel_del is inline, in wheel.h (the cancel path calls it). */

/* ---- time passing ---------------------------------------------------------- */

/* Take slot s of level l whole (the first node of each way keeps a stale
 * pprev until re-linked). */
static struct tmo_wheel_slot slot_take(struct tmo_wheel *w, unsigned l, unsigned s)
{
	slot_unmark(w, l, s);
	struct tmo_wheel_slot t = {{NULL}};
	if (l < TMO_WHEEL_WAYS_LEVELS) {
		t = w->slot[l][s];
		memset(&w->slot[l][s], 0, sizeof t);
	} else {
		t.head[0] = w->slot_up[l - TMO_WHEEL_WAYS_LEVELS][s];
		w->slot_up[l - TMO_WHEEL_WAYS_LEVELS][s] = NULL;
	}
	return t;
}

/* File up to k nodes of pending[l] where they now belong. */
static void pending_move(struct tmo_wheel *w, unsigned l, uint64_t k)
{
	uint64_t moved = ways_move(w, &w->pending[l], k);
	w->pending_left[l] = w->pending_left[l] > moved ? w->pending_left[l] - moved : 0;
}

/* T has entered a new block at level l: the next block's slot of level
 * l + 1 becomes pending[l], which must be empty. */
static void pending_start(struct tmo_wheel *w, unsigned l)
{
	unsigned s = (unsigned)((block_of(w->now_tick, l) + 1) & RING_MASK);
	uint64_t placed = w->placed[l][s];
	struct tmo_wheel_slot *p = &w->pending[l];
	*p = slot_take(w, l + 1, s);
	ways_mend(p);
	/* a count that stuck at its top: the wheel's count bounds it too */
	w->pending_left[l] = tmo__wheel_slot_empty(p) ? 0 : placed == UINT32_MAX ? w->count : placed;
}

/* Move T forward to t, which must be <= the tick of every node still in
 * the slots, the pending lists and the overflow list; restore Placement
 * (see the top of the file), then move each pending list's share. */
static void rebase(struct tmo_wheel *w, uint64_t t)
{
	uint64_t old = w->now_tick;
	w->now_tick = t;
	if ((t >> EPOCH_SHIFT) != (old >> EPOCH_SHIFT) && w->overflow.head) {
		w->overflow_min = UINT64_MAX;
		refile_chain(w, list_take(&w->overflow));
	}
	for (unsigned l = PACED; l-- > 0;) {
		uint64_t bo = block_of(old, l), bn = block_of(t, l);
		if (bn == bo)
			continue;
		pending_move(w, l, UINT64_MAX); /* block bo + 1: now current or passed */
		if (bn - bo > 1) { /* jumped past the next block: its successor was not pending */
			struct tmo_wheel_slot skipped = slot_take(w, l + 1, (unsigned)(bn & RING_MASK));
			ways_move(w, &skipped, UINT64_MAX);
		}
		/* the next block's slot is the first of l + 1's next block: that
		 * level's pending list may still hold some of it */
		if (l + 1 < PACED && ((bn + 1) >> TMO_WHEEL_BITS) != (bn >> TMO_WHEEL_BITS))
			pending_move(w, l + 1, UINT64_MAX);
		pending_start(w, l);
	}
	for (unsigned l = 0; l < PACED; l++) {
		if (tmo__wheel_slot_empty(&w->pending[l]))
			continue;
		/* empty once T enters the last level-l slot of its block */
		uint64_t deadline = block_start(block_of(t, l) + 1, l) - (UINT64_C(1) << LEVEL_SHIFT(l));
		uint64_t ticks = deadline > t ? deadline - t : 0, left = w->pending_left[l];
		pending_move(w, l, ticks == 0 ? UINT64_MAX : left / (ticks + 1) + 1);
	}
}

/* A slot's heads, or a pending list's, as next_expiry() reads them: n of
 * them from h (h NULL: none to read). */
struct heads {
	struct tmo_wheel_node *const *h;
	unsigned n;
};

static inline struct heads slot_heads(const struct tmo_wheel *w, unsigned l, unsigned s)
{
	if (l < TMO_WHEEL_WAYS_LEVELS)
		return (struct heads){w->slot[l][s].head, TMO_WHEEL_WAYS};
	return (struct heads){&w->slot_up[l - TMO_WHEEL_WAYS_LEVELS][s], 1};
}

/* The first tick of the first occupied slot of block b at level l, and
 * that slot in *slot; UINT64_MAX when the block has none. */
static uint64_t first_slot(const struct tmo_wheel *w, unsigned l, uint64_t b,
                           struct heads *slot)
{
	uint64_t start = block_start(b, l), occ = w->occupied[l][b & 1];
	if (start == UINT64_MAX || occ == 0)
		return UINT64_MAX;
	unsigned s = (unsigned)__builtin_ctzll(occ);
	*slot = slot_heads(w, l, (unsigned)(b & 1) << TMO_WHEEL_BITS | s);
	return start | (uint64_t)s << LEVEL_SHIFT(l);
}

/* Lower bound on the tick of every node in the wheel proper (slots, pending
 * lists and overflow, not `expired`); UINT64_MAX when they are all empty.
 * *level_out tells where it came from: a level, or TMO_WHEEL_LEVELS for the
 * overflow; *list_out the slot or pending list whose nodes start there, or
 * none (h NULL) for a level-0 slot (exact) and for the overflow. */
static uint64_t next_tick(const struct tmo_wheel *w, unsigned *level_out,
                          struct heads *list_out)
{
	uint64_t t = w->now_tick;
	for (unsigned l = 0; l < TMO_WHEEL_LEVELS; l++) {
		uint64_t b = block_of(t, l);
		for (uint64_t k = 0; k < 2; k++) { /* this block, then the next */
			struct heads slot;
			if (k == 1 && l < PACED && !tmo__wheel_slot_empty(&w->pending[l])) {
				*level_out = l;
				*list_out = (struct heads){w->pending[l].head, TMO_WHEEL_WAYS};
				return block_start(b + 1, l);
			}
			uint64_t first = first_slot(w, l, b + k, &slot);
			if (first == UINT64_MAX)
				continue;
			*level_out = l;
			*list_out = l == 0 ? (struct heads){NULL, 0} : slot;
			return first;
		}
	}
	if (w->overflow.head) {
		*level_out = TMO_WHEEL_LEVELS;
		*list_out = (struct heads){NULL, 0};
		/* Every overflow node is at least two epochs past T; nor before
		 * the epoch of overflow_min (a lower bound kept by place(); del()
		 * leaves it low, which costs at most one early re-filing).
		 * Jumping to the start of that epoch re-files the list into the
		 * levels. */
		uint64_t e = (t >> EPOCH_SHIFT) + 2;
		uint64_t first = e > (UINT64_MAX >> EPOCH_SHIFT) ? UINT64_MAX : e << EPOCH_SHIFT;
		uint64_t min_epoch = (w->overflow_min >> EPOCH_SHIFT) << EPOCH_SHIFT;
		return min_epoch > first ? min_epoch : first;
	}
	return UINT64_MAX;
}

/* The earliest tick in a slot of at most NEXT_EXPIRY_SCAN nodes (its ways
 * together), else UINT64_MAX. */
static uint64_t list_min(struct heads sl)
{
	uint64_t min = UINT64_MAX;
	unsigned k = 0;
	for (unsigned j = 0; j < sl.n; j++)
		for (const struct tmo_wheel_node *n = sl.h[j]; n != NULL; n = n->next, k++) {
			if (k == NEXT_EXPIRY_SCAN)
				return UINT64_MAX;
			if (n->expires < min)
				min = n->expires;
		}
	return min;
}

int64_t tmo__wheel_next_expiry(const struct tmo_wheel *w)
{
	if (!tmo__wheel_slot_empty(&w->expired))
		/* Already due: the earliest tick among them, <= the last `now`
		 * given to advance() (not the last processed tick: an advance to
		 * a time ahead, then a node added for a tick between, would hide
		 * that node until the time ahead, behind later ones elsewhere). */
		return tick_ns(w, w->expired_tick);
	unsigned level;
	struct heads list = {NULL, 0};
	uint64_t t = next_tick(w, &level, &list);
	if (t == UINT64_MAX)
		return INT64_MAX;
	if (level == TMO_WHEEL_LEVELS) {
		/* Only the overflow list: overflow_min is a lower bound too, and
		 * exact unless its node was deleted. */
		if (w->overflow_min > t)
			t = w->overflow_min;
	} else if (list.h != NULL) {
		/* The earliest node is in this list (a slot, or a pending list
		 * before its level's next block).  A short one is scanned for the
		 * exact tick, so an engine with a few far timers wakes once, not
		 * once per level on the way down; a long one costs a step. */
		uint64_t min = list_min(list);
		if (min != UINT64_MAX && level < PACED && list.h == w->pending[level].head) {
			/* the next block's slots at this level: their first one's
			 * earliest tick, or its start when it is long */
			struct heads slot = {NULL, 0};
			uint64_t start = first_slot(w, level, block_of(w->now_tick, level) + 1, &slot);
			uint64_t in_slot = level == 0 || start == UINT64_MAX ? start : list_min(slot);
			if (in_slot == UINT64_MAX)
				in_slot = start;
			if (in_slot < min)
				min = in_slot;
		}
		if (min != UINT64_MAX)
			t = min;
	}
	return tick_ns(w, t);
}

/* Move at most max nodes from the fronts of sl's ways, a node of each in
 * turn, to the due list behind *tail; the rest stay on sl.  Returns how
 * many moved. */
static size_t hand_out_max(struct tmo_wheel_node ***tail, struct tmo_wheel_slot *sl, size_t max)
{
	struct ways_walk it = {sl, 0};
	size_t k = 0;
	struct tmo_wheel_node *n;
	while (k < max && (n = ways_take(&it)) != NULL) {
		n->pprev = NULL;
		n->next = NULL;
		**tail = n;
		*tail = &n->next;
		k++;
	}
	ways_mend(sl);
	return k;
}

/* Take level-0 slot s (tick t) whole: at most max of its nodes to the due
 * list, the rest behind what is on `expired` (handed out first by the next
 * advance).  Returns how many were handed out; *left: 1 if any remain. */
static size_t take_tick(struct tmo_wheel *w, unsigned s, uint64_t t,
                        struct tmo_wheel_node ***tail, size_t max, int *left)
{
	int64_t min = w->min0[s]; /* slot_take forgets it */
	struct tmo_wheel_slot rest = slot_take(w, 0, s);
	size_t k = hand_out_max(tail, &rest, max);
	*left = !tmo__wheel_slot_empty(&rest);
	if (*left) {
		/* each way behind the same way of `expired` (most often empty) */
		for (unsigned j = 0; j < TMO_WHEEL_WAYS; j++) {
			if (rest.head[j] == NULL)
				continue;
			struct tmo_wheel_node **end = &w->expired.head[j];
			while (*end != NULL)
				end = &(*end)->next;
			*end = rest.head[j];
			rest.head[j]->pprev = end;
		}
		if (min < w->expired_min) /* the rest's, without a walk of it */
			w->expired_min = min;
		if (t < w->expired_tick)
			w->expired_tick = t;
	}
	return k;
}

size_t tmo__wheel_advance_max(struct tmo_wheel *w, int64_t now, size_t max,
                              struct tmo_wheel_list *due)
{
	struct tmo_wheel_node **tail = &due->head;
	while (*tail)
		tail = &(*tail)->next;

	/* Nodes added after their tick had been processed (and the rest of a
	 * tick a bounded advance stopped in) come first: they are due before
	 * anything still in the slots. */
	size_t k = hand_out_max(&tail, &w->expired, max);
	if (tmo__wheel_slot_empty(&w->expired)) {
		w->expired_tick = UINT64_MAX;
		w->expired_min = INT64_MAX;
	}

	if (k < max && now >= w->origin_ns) {
		/* Process every tick whose start is <= now: 0 .. last. */
		uint64_t rem, last = div_res(w, udiff(now, w->origin_ns), &rem);
		/* The loop needs last + 1 representable: stop one tick short of
		 * the last tick of all (only reachable with r = 1 and now - origin
		 * = 2^64 - 1) and hand that tick out below. */
		int final_tick = last == UINT64_MAX;
		if (final_tick)
			last--;
		while (w->now_tick <= last && k < max) {
			unsigned level;
			struct heads list;
			uint64_t t = next_tick(w, &level, &list);
			if (t > last) {
				rebase(w, last + 1);
				break;
			}
			if (list.h == NULL && level < TMO_WHEEL_LEVELS) {
				/* Level 0 slots hold exactly one tick each: all due. */
				int left;
				k += take_tick(w, (unsigned)(t & RING_MASK), t, &tail, max - k, &left);
				rebase(w, t + 1);
				if (left)
					break; /* max handed out */
			} else {
				/* Jump to the start of the earliest list; rebase
				 * files it to lower levels. */
				rebase(w, t);
			}
		}
		unsigned top = (unsigned)(UINT64_MAX & RING_MASK);
		if (final_tick && k < max && w->now_tick == UINT64_MAX &&
		    (w->occupied[0][top >> TMO_WHEEL_BITS] & (UINT64_C(1) << (top & SLOT_MASK)))) {
			/* T stays at UINT64_MAX: a node filed for it later lands in
			 * this same slot and is handed out by the next advance. */
			int left;
			k += take_tick(w, top, UINT64_MAX, &tail, max - k, &left);
		}
	}
	w->count -= k;
	return k;
}
