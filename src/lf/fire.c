/*
 * The timer thread's step 3 and 4 (timer.c has the loop): collect what is
 * due from every base, put it in deadline order, run the callbacks.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "pool.h"
#include "depot.h"
#include "base.h"
#include "fire.h"
#include "hook.h"

/* Due batches up to this size are sorted by deadline; a larger one already
 * in order but for deadlines less than the resolution less two floors
 * apart (a burst of one instant, whose arms are dated a floor or two
 * apart) is left so: a merge sort of each 4,096-node batch of a burst
 * cost more than firing it (a burst of 1e6 on the wheel: 7.4-7.8M fires/s
 * sorted, 11.2-11.5M not, Intel Xeon).  See near_sorted. */
#define DUE_SORT_MAX 64u
/* A busy per-thread base is retried after this share of a tick. */
#define RETRY_DIV 16
/* Pauses the timer thread spins for a per-thread base's lock. */
#define BASE_SPINS 256
/* The most due nodes a round collects from a base. */
#define COLLECT_BATCH 4096u

/* collect() hands each due node here; due_reserve made room first. */
static void due_add(void *ctx, struct lf_node *n)
{
	struct tmo *e = ctx;
	struct lf_tt *tt = e->tt;
	tt->due[tt->due_n++] = (struct due){
	    n, lf_gen_of(atomic_load_explicit(&n->state, memory_order_relaxed)),
	    e->p->sched->deadline(n), n->timer, 0};
}

static void tt_bytes_update(struct tmo *e);

/* The due arrays reallocated to cap entries, the due_n they hold kept;
 * 0 when out of memory (nothing changed).  Under mem_lock: a fork copies
 * no half-made swap (lf.h). */
static int due_resize(struct tmo *e, size_t cap)
{
	struct lf_tt *tt = e->tt;
	pthread_mutex_lock(&e->mem_lock);
	struct due *d = tmo__malloc(cap * sizeof *d), *t2 = tmo__malloc(cap * sizeof *t2);
	int ok = d != NULL && t2 != NULL;
	if (ok) {
		LF_HOOK(mem, e);
		memcpy(d, tt->due, tt->due_n * sizeof *d);
		tmo__free(tt->due);
		tmo__free(tt->tmp);
		tt->due = d;
		tt->tmp = t2;
		tt->due_cap = cap;
	} else {
		tmo__free(d);
		tmo__free(t2);
	}
	pthread_mutex_unlock(&e->mem_lock);
	return ok;
}

/* Make room for every node a base holds before collecting from it, so
 * due_add never fails.  Returns 0 when it cannot (collect later). */
static int due_reserve(struct tmo *e, uint64_t more)
{
	struct lf_tt *tt = e->tt;
	if (tt->due_n + more <= tt->due_cap)
		return 1;
	size_t cap = tt->due_cap;
	while (cap < tt->due_n + more)
		cap *= 2;
	if (!due_resize(e, cap))
		return 0;
	tt_bytes_update(e);
	return 1;
}

static void tt_bytes_update(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	uint64_t b = (tt->due_cap - DUE_FIRST) * 2 * sizeof(struct due) +
	             e->p->sched->bytes(lf_sched_of(e->tt_base));
	atomic_store_explicit(&tt->bytes, b, memory_order_relaxed);
}

/* Idle: a due array grown by a burst goes back to its first size. */
void tmo__lf_due_shrink(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	if (tt->due_cap > DUE_FIRST && tt->due_n == 0)
		due_resize(e, DUE_FIRST); /* kept as it is when out of memory */
	tt_bytes_update(e);
}

/* What a round may fire while a wheel may still hold a node filed in the
 * tick ending at `tick` (a deadline rounded UP): a deadline before the
 * result.  Such a node, filed at d > tick less the resolution, was armed
 * for d less at most two floors (clock.c: the dating's spread), so what
 * is due by tick less two floors runs in order with it. */
static inline int64_t tick_hold(const struct tmo *e, int64_t tick)
{
	return tick + 1 - 2 * e->margin_ns;
}

/* What a round may fire, for a base whose collect stopped inside the tick
 * at `tick` (next_deadline(s) <= now): a deadline before the result.  A
 * timer left there, filed at d, was armed for d less at most two floors,
 * so what is due by that, plus the resolution, runs in order with it;
 * tick_hold is always safe, and left_min (a lower bound on what the
 * wheel left) lets a burst of one instant fire batch by batch. */
static int64_t split_hold(const struct tmo *e, const struct lf_sched *sc, const void *s,
                          int64_t tick)
{
	int64_t h = tick_hold(e, tick);
	int64_t left = sc->left_min != NULL ? sc->left_min(s) : INT64_MAX;
	if (left != INT64_MAX && left - 2 * e->margin_ns + e->resolution_ns + 1 > h)
		h = left - 2 * e->margin_ns + e->resolution_ns + 1;
	return h;
}

/* What a round may fire while a base whose `next` (its lock's holder
 * wrote it: a deadline of its own, or its wheel's next tick) is <= now is
 * busy: a deadline before the result.  A wheel's node there lies in the
 * tick ending at `next` or later: tick_hold.  A heap's `next` is its
 * least deadline (d >= next): holding back from `next` on is safe.  Held
 * back from `next` on, a wheel's base let a round fire a timer in the
 * same tick as one the base held, due 1.008 ms after it by the clock
 * reads around its arm: the base's was dated at its upper bound (+50 us),
 * the fired one by a clock read; expiry at 1e6 beside four hogs, 2 of 20
 * runs (issue 19).  TMO_LF_PLANT_BUSY_HOLD puts that back
 * (tests/hooked/lf_busy.c). */
static int64_t busy_hold(const struct tmo *e, int64_t next)
{
#ifdef TMO_LF_PLANT_BUSY_HOLD
	return next;
#endif
	return e->p->sched->ordered ? next : tick_hold(e, next);
}

/* A collect that stopped inside a tick gave nodes (tt->due from
 * `from` on) of which the round's hold fires none: batching only delays
 * them (and sorts them again each round), so the rest is taken now. */
static int split_unfireable(struct tmo *e, size_t from, int64_t hold)
{
	const struct lf_tt *tt = e->tt;
	for (size_t i = from; i < tt->due_n; i++)
		if (tt->due[i].deadline < hold)
			return 0;
	return 1;
}

/* How many nodes a collect from s may hand out: what it holds, at most
 * COLLECT_BATCH, at most the room the due array has (doubled only when it
 * has none).  What an ordered structure leaves is due no earlier than what
 * it gave, so a smaller collect only moves the rest to the next round; a
 * wheel that stops inside a tick is handled as a batch's split is
 * (collect_base: it fires what it may, or collects on into a doubled
 * array when it may fire none).  Room for all a structure holds, reserved
 * at each collect, doubled the array for thousands of long timeouts of
 * which a few were due: mpsc under sustain beside two CPU hogs, the array
 * 4,096 to 8,192 entries, up to 262 KB of the 913 KB the engine held; the
 * wheel's two per-thread bases of about 1,000 timers each, 2,048 to 4,096
 * entries, 80 or 240 KB of its 838-903 KB. */
static uint64_t collect_max(const struct tmo *e, const struct lf_sched *sc, const void *s)
{
	uint64_t max = sc->count(s);
	max = max < COLLECT_BATCH ? max : COLLECT_BATCH;
	const struct lf_tt *tt = e->tt;
	uint64_t room = tt->due_cap - tt->due_n;
	if (room == 0)
		room = tt->due_cap; /* due_reserve doubles it */
	return max < room ? max : room;
}

/* Collect from base b (held).  Returns its next deadline.  A base gives at
 * most COLLECT_BATCH nodes a round:
 * a starved timer thread popped a burst of 1e6 due timers for over 5 s
 * before firing the first (issue 19).  What a heap leaves is due no
 * earlier than what it gave, so *hold drops to just after it: the round
 * fires this batch, and nothing due later (from an earlier round's
 * leftovers) before the rest is collected.  A wheel that stops inside a
 * tick gave some of its nodes in no order and left the rest, whose
 * deadlines, one dating's spread early (clock.c: a filed deadline is at
 * most two floors after the arm), may lie more than the resolution before
 * a given one's: the round then fires only what is due that spread before
 * the tick's time.  (Sorted whole, as an unbounded collect does, the tick
 * runs in order; split, a timer due just over the resolution after a
 * leftover ran first, 3 of 7 expiry runs at 1e6 beside four hogs.) */
static int64_t collect_base(struct tmo *e, struct lf_base *b, struct lf_rec *free_to, int64_t now,
                            int64_t *hold)
{
	const struct lf_sched *sc = e->p->sched;
	tmo__lf_base_tidy(e, b, free_to);
	void *s = lf_sched_of(b);
	int64_t next = sc->next_deadline(s);
	while (next <= now) {
		uint64_t max = collect_max(e, sc, s);
		size_t from = e->tt->due_n;
		if (max == 0 || !due_reserve(e, max))
			break;
		sc->collect(s, now, (size_t)max, due_add, e);
		next = sc->next_deadline(s);
		if (sc->ordered || next > now || !split_unfireable(e, from, split_hold(e, sc, s, next)))
			break;
	}
	if (next <= now) {
		int64_t h = sc->ordered ? next + 1 : split_hold(e, sc, s, next);
		if (h < *hold)
			*hold = h;
	}
	atomic_store_explicit(&b->next, next, memory_order_relaxed);
	return next;
}

/* A per-thread base's lock, for the timer thread (base.h): its flag, the
 * heavy barrier, then the owner's flag.  After the barrier an owner that
 * saw no flag of ours is inside, its flag visible, and every later try of
 * the owner's sees ours and backs off: so a short spin for the owner to
 * leave nearly always gets the lock; an owner preempted inside is not
 * waited for (see collect_all). */
static int base_lock_other(struct tmo *e, struct lf_base *b)
{
	atomic_store_explicit(&b->other_in, 1, memory_order_relaxed);
	tmo__lf_heavy_barrier(e);
	for (int i = 0; i < BASE_SPINS; i++) {
		/* acquire: what the owner did under the lock */
		if (atomic_load_explicit(&b->owner_in, memory_order_acquire) == 0)
			return 1;
#ifdef TMO_LF_PLANT_LOCK_OTHER
		return 1; /* planted defect (tests/hooked/lf_lock.c): blind to the owner */
#endif
		lf_cpu_relax();
	}
	atomic_store_explicit(&b->other_in, 0, memory_order_release);
	return 0;
}

static void base_unlock_other(struct lf_base *b)
{
	atomic_store_explicit(&b->other_in, 0, memory_order_release);
}

/* Put a chain taken from b's soon list back, for the next round. */
static void soon_back(struct lf_base *b, struct lf_node *chain)
{
	struct lf_node *tail = chain, *old = NULL;
	while (tail->s.soon.next != NULL)
		tail = tail->s.soon.next;
	do
		tail->s.soon.next = old;
	while (!atomic_compare_exchange_weak_explicit(&b->soon, &old, chain, memory_order_release,
	                                              memory_order_relaxed));
}

/* Take base b's soon list: what its owner handed over.  Room is made for
 * the nodes still QUEUED (a node cancelled on the list is DROPPED, and no
 * later state of it is QUEUED again): room for the whole list doubled the
 * due array for nodes freed at once (the wheel under sustain beside two
 * CPU hogs, lists of 800-2,700 short timeouts mostly cancelled: the array
 * 1,024 to 4,096 entries, 240 KB of the 838-903 KB the engine held).  A
 * QUEUED node met with the array full all the same goes back with the
 * rest of the list, as the whole list does when there is no room.
 * Returns 1 when nodes went back: they may be due before anything the
 * round holds (the caller holds back everything). */
static int take_soon(struct tmo *e, struct lf_base *b)
{
	struct lf_node *chain = atomic_exchange_explicit(&b->soon, NULL, memory_order_acquire);
	size_t queued = 0;
	for (struct lf_node *n = chain; n != NULL; n = n->s.soon.next)
		queued += lf_st_of(atomic_load_explicit(&n->state, memory_order_relaxed)) == LF_QUEUED;
	if (chain == NULL)
		return 0;
	if (queued != 0 && !due_reserve(e, queued)) {
		soon_back(b, chain); /* no room now */
		return 1;
	}
	struct lf_tt *tt = e->tt;
	while (chain != NULL) {
		struct lf_node *n = chain;
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		if (lf_st_of(s) != LF_QUEUED) {
			chain = n->s.soon.next;
			tmo__lf_tt_free(e, n); /* DROPPED on the list */
		} else if (tt->due_n < tt->due_cap) {
			chain = n->s.soon.next;
			tt->due[tt->due_n++] =
			    (struct due){n, lf_gen_of(s), e->p->sched->deadline(n), n->timer, 1};
		} else {
			soon_back(b, chain);
			return 1;
		}
	}
	return 0;
}

/* *wake lowered to a base's next deadline, `lead` before it (a time to
 * look again, a busy base's retry, is not). */
static inline void wake_lead(int64_t *wake, int64_t next, int64_t lead)
{
	if (next != INT64_MAX && next - lead < *wake)
		*wake = next - lead;
}

/* Collect from every base what is due by `now` (the round's time, plus
 * the lead of a wheel's: timer.c, Lead).  Returns the earliest deadline a
 * busy base may hold (INT64_MAX: none was busy): nothing due later may
 * fire before it is collected, or deadlines further apart than the
 * resolution would run out of order.  Lowers *wake to `lead` before the
 * earliest base's next deadline. */
int64_t tmo__lf_collect_all(struct tmo *e, int64_t now, int64_t lead, int64_t *wake)
{
	int64_t hold = INT64_MAX;
	int64_t next = collect_base(e, e->tt_base, e->tt_rec, now, &hold);
	wake_lead(wake, next, lead);
	uint64_t filed = e->p->sched->count(lf_sched_of(e->tt_base));
	atomic_store_explicit(&e->tt->filed, filed, memory_order_relaxed);
	if (!e->p->thread_bases)
		return hold;
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		struct lf_base *b = r->base;
		/* `next` first, then the soon list: an owner hands over, then
		 * raises `next` (release), so a raised `next` comes with its list */
		next = atomic_load_explicit(&b->next, memory_order_acquire);
		int retry = 0;
		int back = atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL &&
		           take_soon(e, b);
		if (next <= now || ck_pr_load_ptr(&b->tofile.head) != NULL ||
		    ck_pr_load_ptr(&b->cancels.head) != NULL) {
			if (base_lock_other(e, b)) {
				next = collect_base(e, b, e->tt_rec, now, &hold);
				/* under the lock nothing more is handed over */
				if (atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)
					back |= take_soon(e, b);
				filed += e->p->sched->count(lf_sched_of(b));
				base_unlock_other(b);
			} else {
				/* Its owner holds it and has not handed over what is due
				 * (it is preempted inside, or its horizon is short): hold
				 * back what is due after that, look again soon.  Nodes
				 * on its tofile stack may be due before anything: hold
				 * back everything. */
				if (next <= now) {
					int64_t h = busy_hold(e, next);
					if (h < hold)
						hold = h;
				}
				if (ck_pr_load_ptr(&b->tofile.head) != NULL)
					hold = INT64_MIN;
				retry = 1;
			}
		}
		if (back) { /* soon nodes left on the list (no room for them) */
			hold = INT64_MIN;
			retry = 1;
		}
		if (retry) /* soon after the round's own time, not its lead's */
			wake_lead(wake, now - lead + e->tick_ns / RETRY_DIV, 0);
		else
			wake_lead(wake, next, lead);
	}
	atomic_store_explicit(&e->tt->filed, filed, memory_order_relaxed);
	return hold;
}

/* Stable merge sort of the due array by deadline. */
static void due_sort(struct due *a, struct due *tmp, size_t n)
{
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				tmp[k++] = a[j].deadline < a[i].deadline ? a[j++] : a[i++];
			while (i < mid)
				tmp[k++] = a[i++];
			while (j < hi)
				tmp[k++] = a[j++];
		}
		memcpy(a, tmp, n * sizeof *a);
	}
}

/* 1 when a[0..n) needs no sort: no deadline lies `slack` or more before
 * one ahead of it.  The slack is the resolution less two floors: a filed
 * deadline is its arm's, plus at most two floors (clock.c), so two timers
 * due more than the resolution apart were filed more than that slack
 * apart, and such a pair out of order is sorted.  Being in tick order (one
 * wheel's hand-out, in no order within a tick) was not enough: a timer
 * dated a floor late by its owner's pair shared a tick with one dated by a
 * clock read, due 1.001-1.006 ms after it by the clock reads around their
 * arms, and ran after it (expiry at 1e5 under TSan, 2 runs in 80;
 * tests/hooked/lf_tick.c).  A merge keeps the bound: two sequences each
 * within it merge into one within it. */
static int near_sorted(const struct due *a, size_t n, int64_t slack)
{
	int64_t max = INT64_MIN;
	for (size_t i = 0; i < n; i++) {
		int64_t d = a[i].deadline;
		if (d > max)
			max = d;
		else if (max - d >= slack)
			return 0;
	}
	return 1;
}

/* Drop what was cancelled while it waited in the due array: a handed-over
 * node its canceller dropped is freed here, so nodes in transit are bounded
 * by one round's arms rather than one tick's. */
void tmo__lf_due_compact(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	size_t k = 0, sorted = 0;
	for (size_t i = 0; i < tt->due_n; i++) {
		struct due *d = &tt->due[i];
		uint64_t s = atomic_load_explicit(&d->n->state, memory_order_acquire);
		if (s == lf_st(d->gen, d->handed ? LF_QUEUED : LF_IN_STRUCT)) {
			tt->due[k++] = *d;
			sorted += i < tt->sorted;
		} else if (d->handed) {
			tmo__lf_tt_free(e, d->n); /* dropped on the list: back home */
		}
	}
	tt->due_n = k;
	tt->sorted = sorted;
}

/* Order the due array: every deadline further apart than the resolution in
 * order.  Its first tt->sorted entries are in order already (what waited
 * from the last round); what this round added is sorted (unless a large
 * batch that needs none: near_sorted) and merged in. */
void tmo__lf_due_order(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	size_t n = tt->due_n, m = tt->sorted;
	int64_t slack = e->resolution_ns - 2 * e->margin_ns;
#ifdef TMO_LF_PLANT_TICK_ORDER /* tests/hooked/lf_tick.c must catch it */
	slack = e->resolution_ns; /* the wheel's tick order, in no order within a tick */
#endif
	if (n - m >= 2 && !(e->p->sched->ordered && !e->p->thread_bases) &&
	    !(n - m > DUE_SORT_MAX && near_sorted(tt->due + m, n - m, slack)))
		due_sort(tt->due + m, tt->tmp + m, n - m);
	if (m > 0 && m < n) {
		size_t i = 0, j = m, k = 0;
		while (i < m && j < n)
			tt->tmp[k++] = tt->due[j].deadline < tt->due[i].deadline ? tt->due[j++]
			                                                        : tt->due[i++];
		while (i < m)
			tt->tmp[k++] = tt->due[i++];
		while (j < n)
			tt->tmp[k++] = tt->due[j++];
		memcpy(tt->due, tt->tmp, n * sizeof *tt->due);
	}
	tt->sorted = n;
}

void tmo__lf_fire(struct tmo *e, struct due *d)
{
	struct lf_node *n = d->n;
	/* a handed-over node is in transit (QUEUED): a cancel drops it and we
	 * free it; a node collected from a base stays IN_STRUCT, and one whose
	 * cancel won (CANCEL_PENDING, or already freed) is its canceller's */
	uint64_t s = lf_st(d->gen, d->handed ? LF_QUEUED : LF_IN_STRUCT);
	/* before FIRING shows: a cancel that sees it reads this ref (lf.h) */
	atomic_store_explicit(&e->cb_ref, tmo__cb_begin(), memory_order_release);
	if (!atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(d->gen, LF_FIRING),
	                                             memory_order_acq_rel, memory_order_acquire)) {
		tmo__cb_end();
		if (d->handed)
			tmo__lf_tt_free(e, n); /* dropped on the list: back home */
		return;
	}
	struct tmo_timer *t = n->timer;
	/* read before the callback: it may free or re-arm the timer */
	tmo_callback *cb = t->cb;
	void *arg = t->arg;
	/* release: a cancel that sees `running` == t reads cb_ref as it is now
	 * (or later); on x86 the same plain store as relaxed */
	atomic_store_explicit(&e->running, t, memory_order_release);
	atomic_store_explicit(lf_timer_word(t), lf_word(lf_idx_of(e, n), d->gen, LF_FIRED),
	                      memory_order_release);
	/* only the timer thread fires: a load and a store, no locked add */
	atomic_store_explicit(&e->fired, atomic_load_explicit(&e->fired, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
	cb(t, arg);
	tmo__end_if_forked(e);
	tmo__cb_end();
	atomic_store_explicit(&e->running, NULL, memory_order_release);
	atomic_store_explicit(&n->state, lf_st(d->gen, LF_FREE), memory_order_release);
	/* after that store: a cancel waiting on FIRING wakes (the timer
	 * thread alone adds to done_ec: a plain add on x86) */
	tmo__lf_ec_wake_sp(&e->done_ec);
	lf_cache_put(e, e->tt_rec, n);
}

