/*
 * Hierarchical timing wheel, see wheel.h.
 *
 * Placement.  Time is counted in ticks from origin_ns; `now_tick` (T below)
 * is the first tick not yet processed.  A node due at tick e >= T lives at
 * the level of the highest 6-bit digit in which e differs from T, in the
 * slot given by e's digit at that level:
 *
 *     level(e) = (index of the highest set bit of e ^ T) / 6   (0 if e == T)
 *     slot(e)  = (e >> 6 * level) & 63
 *
 * So a node at level L shares every digit above L with T, and its digit at
 * L is greater than T's (at level 0: greater or equal).  Two consequences
 * the code relies on:
 *   - slot indices never wrap around: the first occupied slot of a level
 *     (find-first-set of its bitmap) is its earliest, and every node of a
 *     lower level is due before every node of a higher one, so the first
 *     occupied slot of the lowest non-empty level bounds the next due tick;
 *   - when T moves forward to some T' that is still <= every node's tick,
 *     a node keeps its placement unless its digit at its level now equals
 *     T''s: exactly one slot per level (T''s digit) must be re-filed
 *     ("cascaded"), nothing else moves.  (A number between T and e shares
 *     every digit that T and e share.)
 * Nodes whose highest differing digit is above the top level wait on the
 * overflow list; it is re-filed whenever T enters a new top-level epoch.
 * A node added with a tick already processed (e < T) waits on `expired`
 * and is handed out by the next advance().
 *
 * Costs.  add/del O(1).  advance() jumps over empty stretches with the
 * bitmaps (a jump of 2^40 ticks costs as little as a jump of 1), and each
 * node is re-filed at most once per level on its way down, plus once per
 * top-level epoch while on the overflow list.
 */
#include "ds/wheel.h"

#define LEVEL_SHIFT(l) ((unsigned)(l) * TMO_WHEEL_BITS)
#define SLOT_MASK ((uint64_t)TMO_WHEEL_SLOTS - 1)
/* next_expiry() reads at most this many nodes of a higher-level slot to
 * return an exact time (bounded: it must stay cheap). */
#define NEXT_EXPIRY_SCAN 16u
/* Ticks covered by all levels together: the top-level epoch. */
#define EPOCH_SHIFT LEVEL_SHIFT(TMO_WHEEL_LEVELS)

_Static_assert(TMO_WHEEL_SLOTS == 64, "one uint64_t bitmap per level");
_Static_assert(EPOCH_SHIFT < 64, "levels must leave room for the epoch");

int tmo_wheel_init(struct tmo_wheel *w, int64_t resolution_ns, int64_t now_ns)
{
	if (w == NULL || resolution_ns <= 0)
		return TMO_WHEEL_EINVAL;
	w->resolution_ns = resolution_ns;
	w->res_inv = UINT64_MAX / (uint64_t)resolution_ns;
	w->origin_ns = now_ns;
	w->now_tick = 0;
	w->count = 0;
	for (unsigned l = 0; l < TMO_WHEEL_LEVELS; l++) {
		w->occupied[l] = 0;
		for (unsigned s = 0; s < TMO_WHEEL_SLOTS; s++)
			w->slot[l][s].head = NULL;
	}
	w->overflow.head = NULL;
	w->overflow_min = UINT64_MAX;
	w->expired.head = NULL;
	return 0;
}

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

/* First tick whose start is >= deadline: rounding up is what makes "never
 * early" hold.  Deadlines at or before the origin map to tick 0. */
static inline uint64_t tick_ceil(const struct tmo_wheel *w, int64_t deadline)
{
	if (deadline <= w->origin_ns)
		return 0;
	uint64_t rem, q = div_res(w, udiff(deadline, w->origin_ns), &rem);
	return q + (rem != 0);
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

static inline void list_push(struct tmo_wheel_list *l, struct tmo_wheel_node *n)
{
	n->next = l->head;
	if (n->next)
		n->next->pprev = &n->next;
	l->head = n;
	n->pprev = &l->head;
}

/* Take the whole list; the nodes keep stale pprev values until re-linked. */
static inline struct tmo_wheel_node *list_take(struct tmo_wheel_list *l)
{
	struct tmo_wheel_node *h = l->head;
	l->head = NULL;
	return h;
}

/* ---- placement -------------------------------------------------------------- */

/* Put n where its tick belongs (see Placement at the top): on `expired` when
 * already processed, on `overflow` beyond the top level, else in its slot. */
static void place(struct tmo_wheel *w, struct tmo_wheel_node *n)
{
	uint64_t e = n->expires, t = w->now_tick;
	if (e < t) {
		list_push(&w->expired, n);
		return;
	}
	uint64_t x = e ^ t;
	unsigned level = x ? (unsigned)(63 - __builtin_clzll(x)) / TMO_WHEEL_BITS : 0;
	if (level >= TMO_WHEEL_LEVELS) {
		list_push(&w->overflow, n);
		if (e < w->overflow_min)
			w->overflow_min = e;
		return;
	}
	unsigned s = (unsigned)((e >> LEVEL_SHIFT(level)) & SLOT_MASK);
	list_push(&w->slot[level][s], n);
	w->occupied[level] |= UINT64_C(1) << s;
}

static void refile_chain(struct tmo_wheel *w, struct tmo_wheel_node *n)
{
	while (n) {
		struct tmo_wheel_node *next = n->next;
		place(w, n);
		n = next;
	}
}

void tmo_wheel_add(struct tmo_wheel *w, struct tmo_wheel_node *n, int64_t deadline)
{
	n->deadline = deadline;
	n->expires = tick_ceil(w, deadline);
	place(w, n);
	w->count++;
}

void tmo_wheel_del(struct tmo_wheel *w, struct tmo_wheel_node *n)
{
	struct tmo_wheel_node **pprev = n->pprev;
	*pprev = n->next;
	if (n->next)
		n->next->pprev = pprev;
	/* The slot became empty iff we were its only node: pprev is then the
	 * slot's own head and nothing followed us.  Recognise a slot head by its
	 * address, so no level/slot index has to be stored in the node. */
	if (n->next == NULL) {
		uintptr_t p = (uintptr_t)pprev, base = (uintptr_t)&w->slot[0][0];
		if (p >= base && p < base + sizeof w->slot) {
			size_t i = (p - base) / sizeof(struct tmo_wheel_list);
			w->occupied[i / TMO_WHEEL_SLOTS] &= ~(UINT64_C(1) << (i % TMO_WHEEL_SLOTS));
		}
	}
	n->next = NULL;
	n->pprev = NULL;
	w->count--;
}

/* Lower bound on the tick of every node in the wheel proper (slots and
 * overflow, not `expired`); UINT64_MAX when they are all empty.  *level_out
 * tells where it came from: a level, or TMO_WHEEL_LEVELS for the overflow. */
static uint64_t next_tick(const struct tmo_wheel *w, unsigned *level_out)
{
	uint64_t t = w->now_tick;
	for (unsigned l = 0; l < TMO_WHEEL_LEVELS; l++) {
		uint64_t occ = w->occupied[l];
		if (occ == 0)
			continue;
		unsigned s = (unsigned)__builtin_ctzll(occ);
		unsigned above = LEVEL_SHIFT(l + 1);
		uint64_t prefix = above >= 64 ? 0 : (t >> above) << above;
		*level_out = l;
		return prefix | ((uint64_t)s << LEVEL_SHIFT(l));
	}
	if (w->overflow.head) {
		*level_out = TMO_WHEEL_LEVELS;
		/* Every overflow node differs from T above the top level and is
		 * later than T, so it is not before the next epoch; nor before the
		 * epoch of overflow_min (a lower bound kept by place(); del() leaves
		 * it low, which costs at most one early re-filing).  Jumping to
		 * the start of that epoch re-files the list into the levels. */
		uint64_t next_epoch = ((t >> EPOCH_SHIFT) + 1) << EPOCH_SHIFT;
		uint64_t min_epoch = (w->overflow_min >> EPOCH_SHIFT) << EPOCH_SHIFT;
		return min_epoch > next_epoch ? min_epoch : next_epoch;
	}
	return UINT64_MAX;
}

int64_t tmo_wheel_next_expiry(const struct tmo_wheel *w)
{
	if (w->expired.head)
		/* Already due: the start of the last processed tick, a time the
		 * caller has already passed to advance(). */
		return tick_ns(w, w->now_tick - 1);
	unsigned level;
	uint64_t t = next_tick(w, &level);
	if (t == UINT64_MAX)
		return INT64_MAX;
	if (level == TMO_WHEEL_LEVELS) {
		/* Only the overflow list: overflow_min is a lower bound too, and
		 * exact unless its node was deleted. */
		if (w->overflow_min > t)
			t = w->overflow_min;
	} else if (level > 0) {
		/* The earliest node is in this slot (slots and levels are
		 * ordered).  A short slot is scanned for the exact tick, so an
		 * engine with a few far timers wakes once, not once per level on
		 * the way down; a long one costs a cascade step instead. */
		const struct tmo_wheel_node *n =
		    w->slot[level][(t >> LEVEL_SHIFT(level)) & SLOT_MASK].head;
		uint64_t min = UINT64_MAX;
		unsigned k = 0;
		for (; n != NULL && k < NEXT_EXPIRY_SCAN; n = n->next, k++)
			if (n->expires < min)
				min = n->expires;
		if (n == NULL)
			t = min;
	}
	return tick_ns(w, t);
}

/* Move T forward to t, which must be <= the tick of every node still in the
 * slots and the overflow list; restore the placement invariant by cascading
 * T's digit slot at each level (see the top of the file). */
static void rebase(struct tmo_wheel *w, uint64_t t)
{
	uint64_t old = w->now_tick;
	w->now_tick = t;
	for (unsigned l = 1; l < TMO_WHEEL_LEVELS; l++) {
		unsigned s = (unsigned)((t >> LEVEL_SHIFT(l)) & SLOT_MASK);
		uint64_t bit = UINT64_C(1) << s;
		if (w->occupied[l] & bit) {
			w->occupied[l] &= ~bit;
			refile_chain(w, list_take(&w->slot[l][s]));
		}
	}
	if ((t >> EPOCH_SHIFT) != (old >> EPOCH_SHIFT) && w->overflow.head) {
		w->overflow_min = UINT64_MAX;
		refile_chain(w, list_take(&w->overflow));
	}
}

/* Append a chain (linked by next) to the due list behind *tail; returns how
 * many nodes.  Nodes on the due list are out of the wheel: pprev NULL. */
static size_t hand_out(struct tmo_wheel_node ***tail, struct tmo_wheel_node *n)
{
	size_t k = 0;
	while (n) {
		struct tmo_wheel_node *next = n->next;
		n->pprev = NULL;
		n->next = NULL;
		**tail = n;
		*tail = &n->next;
		n = next;
		k++;
	}
	return k;
}

size_t tmo_wheel_advance(struct tmo_wheel *w, int64_t now, struct tmo_wheel_list *due)
{
	struct tmo_wheel_node **tail = &due->head;
	while (*tail)
		tail = &(*tail)->next;

	/* Nodes added after their tick had been processed come first: they are
	 * due before anything still in the slots. */
	size_t k = hand_out(&tail, list_take(&w->expired));

	if (now >= w->origin_ns) {
		/* Process every tick whose start is <= now: 0 .. last. */
		uint64_t rem, last = div_res(w, udiff(now, w->origin_ns), &rem);
		/* The loop needs last + 1 representable: stop one tick short of
		 * the last tick of all (only reachable with r = 1 and now - origin
		 * = 2^64 - 1) and hand that tick out below. */
		int final_tick = last == UINT64_MAX;
		if (final_tick)
			last--;
		while (w->now_tick <= last) {
			unsigned level;
			uint64_t t = next_tick(w, &level);
			if (t > last) {
				rebase(w, last + 1);
				break;
			}
			if (level == 0) {
				/* Level 0 slots hold exactly one tick each: all due. */
				unsigned s = (unsigned)(t & SLOT_MASK);
				w->occupied[0] &= ~(UINT64_C(1) << s);
				k += hand_out(&tail, list_take(&w->slot[0][s]));
				rebase(w, t + 1);
			} else {
				/* Jump to the start of the earliest non-empty slot;
				 * rebase cascades it to lower levels. */
				rebase(w, t);
			}
		}
		if (final_tick && w->now_tick == UINT64_MAX &&
		    (w->occupied[0] & (UINT64_C(1) << (UINT64_MAX & SLOT_MASK)))) {
			/* T stays at UINT64_MAX: a node filed for it later lands in
			 * this same slot and is handed out by the next advance. */
			w->occupied[0] &= ~(UINT64_C(1) << (UINT64_MAX & SLOT_MASK));
			k += hand_out(&tail, list_take(&w->slot[0][UINT64_MAX & SLOT_MASK]));
		}
	}
	w->count -= k;
	return k;
}
