/*
 * The timer thread of the lock-free core, and the engine's life: create,
 * destroy, stats, park (lf.h has the design).
 *
 * One round of the loop:
 *   1. publish a tick (clock.c);
 *   2. steal every ring arm that could come due before the next round, and
 *      take the inbox: both are filed in the timer thread's own base;
 *   3. collect what is due from its base and every per-thread base (each
 *      try-locked; a busy one is retried a little later), sort by deadline;
 *   4. run the callbacks, one at a time, stopping at once for destroy;
 *   5. sleep: one tick while arms keep coming; else, after a few idle
 *      rounds, set LF_TW_SLEEPING, give back free pages, look everywhere
 *      once more (Dekker with arm, clock.c) and sleep until the earliest
 *      deadline or a wake-up.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "lf.h"

/* Idle rounds (no arm anywhere, nothing in the inbox) before it sleeps. */
#define IDLE_ROUNDS 4
/* Due batches up to this size are sorted by deadline. */
#define DUE_SORT_MAX 4096u
#define DUE_FIRST 1024u
/* A busy per-thread base is retried after this share of a tick. */
#define RETRY_DIV 16
/* How often the TSC calibration is refreshed while rounds follow each
 * other (a round after a sleep always refreshes it). */
#define CAL_EVERY_NS (100 * TMO_NSEC_PER_USEC)
/* The least sleep ahead for which the timer thread gives memory back. */
#define TRIM_SLEEP_MIN (50 * TMO_NSEC_PER_MSEC)
/* A due array longer than this is rid of cancelled entries each round. */
#define DUE_COMPACT_MIN 64

/* Pauses the timer thread spins for a per-thread base's lock. */
#define BASE_SPINS 256

struct due {
	struct lf_node *n;
	uint64_t gen;
	int64_t deadline;
	int handed; /* from a soon list: QUEUED, the timer thread frees it if dropped */
};

/* Timer-thread state (timer thread only, besides the debug counters). */
struct lf_tt {
	struct due *due, *tmp;
	size_t due_n, due_cap;
	size_t sorted; /* due[0..sorted) is in deadline order */
	struct lf_node *unfiled; /* QUEUED nodes its base could not take yet */
	int64_t last_tick, precise_until, last_cal;
	int last_precise; /* the last tick made arms precise */
	int idle;
	/* bytes it holds beyond its fixed size (stats) */
	_Atomic uint64_t bytes;
	_Atomic uint64_t stolen, via_inbox, filed;
};

/* ---- bases ---------------------------------------------------------------------- */

struct lf_base *lf_base_new(struct tmo *e)
{
	const struct lf_sched *sc = e->p->sched;
	struct lf_base *b = tmo__aligned_alloc(64, sizeof *b + sc->size);
	if (b == NULL)
		return NULL;
	memset(b, 0, sizeof *b + sc->size);
	if (sc->init(lf_sched_of(b), e->resolution_ns, e->origin_ns) != 0) {
		tmo__free(b);
		return NULL;
	}
	atomic_store_explicit(&b->next, INT64_MAX, memory_order_relaxed);
	ck_stack_init(&b->cancels);
	ck_stack_init(&b->tofile);
	atomic_fetch_add_explicit(&e->rec_bytes, sizeof *b + sc->size, memory_order_relaxed);
	return b;
}

void lf_base_free(struct tmo *e, struct lf_base *b)
{
	e->p->sched->fini(lf_sched_of(b));
	tmo__free(b);
}

/* ---- filing (timer thread) -------------------------------------------------------- */

/* A QUEUED node we hold goes into our base (or waits on `unfiled`). */
static void file_tt(struct tmo *e, struct lf_node *n, uint64_t gen, int64_t deadline)
{
	const struct lf_sched *sc = e->p->sched;
	atomic_store_explicit(&n->aux, LF_IN_TT, memory_order_relaxed);
	if (sc->insert(lf_sched_of(e->tt_base), n, deadline) != 0) {
		n->s.unfiled.when = deadline;
		n->free_next = e->tt->unfiled; /* QUEUED: its link is ours */
		e->tt->unfiled = n;
		return;
	}
	uint64_t s = lf_st(gen, LF_QUEUED);
	if (!atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_IN_STRUCT),
	                                             memory_order_acq_rel, memory_order_acquire)) {
		sc->remove(lf_sched_of(e->tt_base), n); /* cancelled on the way */
		lf_cache_put(e, e->tt_rec, n);
	}
}

static void retry_unfiled(struct tmo *e)
{
	struct lf_node *n = e->tt->unfiled;
	e->tt->unfiled = NULL;
	while (n != NULL) {
		struct lf_node *next = n->free_next;
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		if (lf_st_of(s) == LF_DROPPED)
			lf_cache_put(e, e->tt_rec, n);
		else
			file_tt(e, n, lf_gen_of(s), n->s.unfiled.when);
		n = next;
	}
}

/* ---- steal and drain ---------------------------------------------------------------- */

/* Steal a ring arm.  Every arm still in a ring when the timer thread looks
 * is taken: an arm that lives longer than a tick gains nothing from staying
 * (its cancel then costs a CAS and a trip through the base either way), and
 * the thread never reads a node it has not won.  Returns 1 if it stole. */
static int steal_one(struct tmo *e, struct lf_rec *r, uint32_t i, uint64_t w)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t gen = lf_word_gen(w);
	uint64_t s = lf_st(gen, LF_RING);
	if (atomic_load_explicit(&n->state, memory_order_relaxed) != s ||
	    !atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_QUEUED),
	                                             memory_order_acq_rel, memory_order_relaxed))
		return 0;
	int64_t later = tmo_now_ns(); /* after the arm */
	/* or, tighter, a reading its owner took after it (lf_rec) */
	if (atomic_load_explicit(&r->bound_w[i], memory_order_acquire) == w) {
		int64_t b = atomic_load_explicit(&r->bound_ns[i], memory_order_relaxed);
		if (b < later)
			later = b;
	}
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	int64_t timeout = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
	file_tt(e, n, gen, lf_arm_time_upper_before(e, stamp, later) + timeout);
	atomic_fetch_add_explicit(&e->tt->stolen, 1, memory_order_relaxed);
	return 1;
}

/* Walk every record: steal from rings, note activity.  Returns 1 if any
 * thread armed since the last look, 2 if it also stole. */
static int steal_rings(struct tmo *e)
{
	int active = 0;
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		uint64_t armed = atomic_load_explicit(&r->head, memory_order_relaxed);
		if (armed != r->seen_head) {
			r->seen_head = armed;
			active = 1;
		}
		for (uint32_t i = 0; i < LF_RING_SLOTS; i++) {
			uint64_t w = atomic_load_explicit(&r->ring[i], memory_order_acquire);
			if (w != 0 && steal_one(e, r, i, w))
				active |= 2;
		}
	}
	return active;
}

/* Take the inbox, oldest first (equal deadlines keep their arm order).
 * Returns 1 if it held anything. */
static int drain_inbox(struct tmo *e)
{
	ck_stack_entry_t *l = ck_stack_batch_pop_upmc(&e->inbox);
	if (l == NULL)
		return 0;
	int64_t later = tmo_now_ns(); /* after every arm in the chain */
	ck_stack_entry_t *rev = NULL;
	uint64_t taken = 0;
	while (l != NULL) {
		ck_stack_entry_t *next = l->next;
		l->next = rev;
		rev = l;
		l = next;
		taken++;
	}
	atomic_store_explicit(&e->inbox_out,
	                      atomic_load_explicit(&e->inbox_out, memory_order_relaxed) + taken,
	                      memory_order_relaxed);
	while (rev != NULL) {
		struct lf_node *n = lf_node_of_link(rev);
		rev = rev->next; /* before filing: a cancel may push it again */
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		if (lf_st_of(s) != LF_QUEUED) { /* DROPPED on the way */
			lf_cache_put(e, e->tt_rec, n);
			continue;
		}
		uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
		int64_t timeout = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
		file_tt(e, n, lf_gen_of(s), lf_arm_time_upper_before(e, stamp, later) + timeout);
		atomic_fetch_add_explicit(&e->tt->via_inbox, 1, memory_order_relaxed);
	}
	return 1;
}

/* ---- collect, sort, fire ------------------------------------------------------------- */

/* collect() hands each due node here; due_reserve made room first. */
static void due_add(void *ctx, struct lf_node *n)
{
	struct tmo *e = ctx;
	struct lf_tt *tt = e->tt;
	tt->due[tt->due_n++] = (struct due){
	    n, lf_gen_of(atomic_load_explicit(&n->state, memory_order_relaxed)),
	    e->p->sched->deadline(n), 0};
}

static void tt_bytes_update(struct tmo *e);
static int64_t tt_tick(struct tmo *e, unsigned flags);

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
	struct due *d = tmo__malloc(cap * sizeof *d), *t2 = tmo__malloc(cap * sizeof *t2);
	if (d == NULL || t2 == NULL) {
		tmo__free(d);
		tmo__free(t2);
		return 0;
	}
	memcpy(d, tt->due, tt->due_n * sizeof *d);
	tmo__free(tt->due);
	tmo__free(tt->tmp);
	tt->due = d;
	tt->tmp = t2;
	tt->due_cap = cap;
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
static void due_shrink(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	if (tt->due_cap > DUE_FIRST && tt->due_n == 0) {
		struct due *d = tmo__malloc(DUE_FIRST * sizeof *d), *t2 = tmo__malloc(DUE_FIRST * sizeof *t2);
		if (d != NULL && t2 != NULL) {
			tmo__free(tt->due);
			tmo__free(tt->tmp);
			tt->due = d;
			tt->tmp = t2;
			tt->due_cap = DUE_FIRST;
			tt->due_n = 0;
		} else {
			tmo__free(d);
			tmo__free(t2);
		}
	}
	tt_bytes_update(e);
}

/* Collect from base b (held).  Returns its next deadline. */
static int64_t collect_base(struct tmo *e, struct lf_base *b, struct lf_rec *free_to, int64_t now)
{
	const struct lf_sched *sc = e->p->sched;
	lf_base_tidy(e, b, free_to);
	void *s = lf_sched_of(b);
	if (sc->next_deadline(s) <= now && due_reserve(e, sc->count(s)))
		sc->collect(s, now, due_add, e);
	int64_t next = sc->next_deadline(s);
	atomic_store_explicit(&b->next, next, memory_order_relaxed);
	return next;
}

/* A per-thread base's lock, for the timer thread: its owner holds it for
 * one filing at a time, so a short spin nearly always gets it; an owner
 * preempted while holding it is not waited for (see collect_all). */
static int base_lock_spin(struct lf_base *b)
{
	for (int i = 0; i < BASE_SPINS; i++) {
		if (lf_base_trylock(b))
			return 1;
		__builtin_ia32_pause();
	}
	return 0;
}

/* Take base b's soon list: what its owner handed over. */
static void take_soon(struct tmo *e, struct lf_base *b)
{
	struct lf_node *chain = atomic_exchange_explicit(&b->soon, NULL, memory_order_acquire);
	size_t k = 0;
	for (struct lf_node *n = chain; n != NULL; n = n->s.soon.next)
		k++;
	if (k == 0 || !due_reserve(e, k)) {
		if (k != 0) { /* no room now: back for the next round */
			struct lf_node *tail = chain, *old = NULL;
			while (tail->s.soon.next != NULL)
				tail = tail->s.soon.next;
			do
				tail->s.soon.next = old;
			while (!atomic_compare_exchange_weak_explicit(&b->soon, &old, chain,
			                                              memory_order_release,
			                                              memory_order_relaxed));
		}
		return;
	}
	struct lf_tt *tt = e->tt;
	while (chain != NULL) {
		struct lf_node *n = chain;
		chain = n->s.soon.next;
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		if (lf_st_of(s) == LF_QUEUED)
			tt->due[tt->due_n++] =
			    (struct due){n, lf_gen_of(s), e->p->sched->deadline(n), 1};
		else
			lf_cache_put(e, e->tt_rec, n); /* DROPPED on the list */
	}
}

/* Collect from every base.  Returns the earliest deadline a busy base may
 * hold (INT64_MAX: none was busy): nothing due later may fire before it is
 * collected, or deadlines further apart than the resolution would run out
 * of order. */
static int64_t collect_all(struct tmo *e, int64_t now, int64_t *wake)
{
	int64_t hold = INT64_MAX;
	int64_t next = collect_base(e, e->tt_base, e->tt_rec, now);
	if (next < *wake)
		*wake = next;
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
		if (atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)
			take_soon(e, b);
		if (next <= now || ck_pr_load_ptr(&b->tofile.head) != NULL ||
		    ck_pr_load_ptr(&b->cancels.head) != NULL) {
			if (base_lock_spin(b)) {
				next = collect_base(e, b, e->tt_rec, now);
				/* under the lock nothing more is handed over */
				if (atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)
					take_soon(e, b);
				filed += e->p->sched->count(lf_sched_of(b));
				lf_base_unlock(b);
			} else {
				/* Its owner holds it and has not handed over what is due
				 * (it is preempted inside, or its horizon is short): hold
				 * back what is due after that, look again soon. */
				if (next <= now && next < hold)
					hold = next;
				next = now + e->tick_ns / RETRY_DIV;
			}
		}
		if (next < *wake)
			*wake = next;
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

/* 1 when a[0..n) is in tick order (one wheel's hand-out). */
static int tick_sorted(const struct due *a, size_t n, int64_t r)
{
	for (size_t i = 1; i < n; i++)
		if (a[i].deadline / r < a[i - 1].deadline / r)
			return 0;
	return 1;
}

/* Drop what was cancelled while it waited in the due array: a handed-over
 * node its canceller dropped is freed here, so nodes in transit are bounded
 * by one round's arms rather than one tick's. */
static void due_compact(struct tmo *e)
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
			lf_cache_put(e, e->tt_rec, d->n);
		}
	}
	tt->due_n = k;
	tt->sorted = sorted;
}

/* Order the due array: every deadline further apart than the resolution in
 * order.  Its first tt->sorted entries are in order already (what waited
 * from the last round); what this round added is sorted (unless a large
 * batch in tick order already: one wheel's burst) and merged in. */
static void due_order(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	size_t n = tt->due_n, m = tt->sorted;
	if (n - m >= 2 && !(e->p->sched->ordered && !e->p->thread_bases) &&
	    !(n - m > DUE_SORT_MAX && tick_sorted(tt->due + m, n - m, e->resolution_ns)))
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

static void fire(struct tmo *e, struct due *d)
{
	struct lf_node *n = d->n;
	/* a handed-over node is in transit (QUEUED): a cancel drops it and we
	 * free it; a node collected from a base stays IN_STRUCT, and one whose
	 * cancel won (CANCEL_PENDING, or already freed) is its canceller's */
	uint64_t s = lf_st(d->gen, d->handed ? LF_QUEUED : LF_IN_STRUCT);
	if (!atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(d->gen, LF_FIRING),
	                                             memory_order_acq_rel, memory_order_acquire)) {
		if (d->handed)
			lf_cache_put(e, e->tt_rec, n);
		return;
	}
	struct tmo_timer *t = n->timer;
	/* read before the callback: it may free or re-arm the timer */
	tmo_callback *cb = t->cb;
	void *arg = t->arg;
	atomic_store_explicit(&e->running, t, memory_order_relaxed);
	atomic_store_explicit(lf_timer_word(t), lf_word(lf_idx_of(e, n), d->gen, LF_FIRED),
	                      memory_order_release);
	atomic_fetch_add_explicit(&e->fired, 1, memory_order_relaxed);
	cb(t, arg);
	tmo__end_if_forked(e);
	atomic_store_explicit(&e->running, NULL, memory_order_release);
	atomic_store_explicit(&n->state, lf_st(d->gen, LF_FREE), memory_order_release);
	lf_ec_wake(&e->done_ec); /* after that store: a cancel waiting on FIRING wakes */
	lf_cache_put(e, e->tt_rec, n);
}

/* ---- the loop ------------------------------------------------------------------------ */

static void park_hook(struct tmo *e)
{
	pthread_mutex_lock(&e->park_lock);
	if (e->park_req) {
		e->parked = 1;
		pthread_cond_broadcast(&e->park_cv);
		while (e->park_req && !atomic_load(&e->stop))
			pthread_cond_wait(&e->park_cv, &e->park_lock);
		e->parked = 0;
	}
	pthread_mutex_unlock(&e->park_lock);
}

/* After LF_TW_SLEEPING is visible: anything published before it that the
 * round missed?  Lowers *wake to the earliest base's next deadline. */
static int work_waiting(struct tmo *e, int64_t *wake)
{
	if ((steal_rings(e) & 2) || ck_pr_load_ptr(&e->inbox.head) != NULL ||
	    ck_pr_load_ptr(&e->tt_base->cancels.head) != NULL)
		return 1;
	if (!e->p->thread_bases)
		return 0;
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		if (ck_pr_load_ptr(&r->base->cancels.head) != NULL ||
		    ck_pr_load_ptr(&r->base->tofile.head) != NULL ||
		    atomic_load_explicit(&r->base->soon, memory_order_relaxed) != NULL)
			return 1;
		int64_t next = atomic_load_explicit(&r->base->next, memory_order_relaxed);
		if (next < *wake)
			*wake = next;
	}
	return 0;
}

/* Publish a tick.  A coarse tick opens a nap; the next tick closes it, and
 * its reading bounds the arms made during it.  A nap longer than the period
 * plus a quarter resolution (a hog, a preempted timer thread) means arms
 * made in it may be dated beyond the resolution: arms stay precise for a
 * while.  Everything else the timer thread does runs under a precise
 * tick. */
static int64_t tt_tick(struct tmo *e, unsigned flags)
{
	struct lf_tt *tt = e->tt;
	int64_t now = tmo_now_ns();
	if (e->tick_ns > 0 && !tt->last_precise && !tmo__timely_timer() &&
	    now - tt->last_tick > e->tick_ns + e->resolution_ns / 4)
		tt->precise_until = now + lf_precise_hold_ns();
	if (e->tick_ns == 0 || now < tt->precise_until)
		flags |= LF_TW_PRECISE;
	tt->last_tick = lf_tick_publish(e, flags);
	tt->last_precise = (flags & LF_TW_PRECISE) != 0;
	return tt->last_tick;
}

static void *timer_main(void *arg)
{
	struct tmo *e = arg;
	struct lf_tt *tt = e->tt;
	tmo__thread_engine = e;
	/* wake-ups are what the resolution is made of: no slack on them */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	tt->last_precise = 1;
	for (;;) {
		if (LF_UNLIKELY(atomic_load_explicit(&e->park_flag, memory_order_acquire))) {
			tt_tick(e, LF_TW_PRECISE);
			park_hook(e);
		}
		if (LF_UNLIKELY(atomic_load_explicit(&e->stop, memory_order_acquire)))
			break;

		/* 1, 2. tick, steal, drain.  A round's work may take long
		 * (collecting a wheel, callbacks): arms made meanwhile are dated
		 * precisely, and coarse ticks cover only the naps between rounds
		 * (the tick that ends a nap bounds the arms made during it). */
		int64_t now = tt_tick(e, LF_TW_PRECISE);
		if (now - tt->last_cal >= CAL_EVERY_NS) {
			lf_cal_update(e);
			tt->last_cal = now;
		}
		int64_t wake = INT64_MAX;
		int active = steal_rings(e);
		active |= drain_inbox(e);
		if (LF_UNLIKELY(tt->unfiled != NULL))
			retry_unfiled(e);

		/* 3, 4. collect and fire: what is due before every busy base's
		 * earliest deadline; the rest waits (in the due array) for the
		 * next round */
		now = tmo_now_ns();
		int64_t hold = collect_all(e, now, &wake);
		if (tt->due_n > DUE_COMPACT_MIN)
			due_compact(e);
		if (tt->due_n > 0) {
			due_order(e);
			/* Handed-over timers may not be due yet: they wait here.  On a
			 * wheel a timer is due at its tick, wherever it waits, so that
			 * every source releases one tick's timers together. */
			int64_t due_by = now;
			if (e->p->thread_bases)
				due_by = now - (now - e->origin_ns) % e->resolution_ns - 1;
			if (hold > due_by + 1)
				hold = due_by + 1;
			size_t k = 0;
			for (; k < tt->due_n && tt->due[k].deadline < hold; k++) {
				if (atomic_load_explicit(&e->stop, memory_order_acquire))
					break; /* destroy cancels the rest */
				fire(e, &tt->due[k]);
			}
			memmove(tt->due, tt->due + k, (tt->due_n - k) * sizeof *tt->due);
			tt->due_n -= k;
			tt->sorted = tt->due_n;
			if (tt->due_n > 0) {
				int64_t d = tt->due[0].deadline, at = d;
				if (e->p->thread_bases && (d - e->origin_ns) % e->resolution_ns != 0)
					at = d + e->resolution_ns - (d - e->origin_ns) % e->resolution_ns;
				if (at < wake)
					wake = at;
			}
			if (k > 0) {
				tt->idle = 0;
				continue; /* callbacks took time: look again */
			}
		}

		/* 5. sleep */
		if (tt->unfiled != NULL && wake > now + TMO_NSEC_PER_MSEC)
			wake = now + TMO_NSEC_PER_MSEC;
		tt->idle = active || tmo__timely_timer() ? 0 : tt->idle + 1;
		uint32_t v = lf_ec_value(&e->wake_ec);
		int64_t poll = e->tick_ns > 0 ? e->tick_ns : e->resolution_ns;
		if (tt->idle < IDLE_ROUNDS) {
			/* arms keep coming: nap until the next tick, arms dated by
			 * this one meanwhile */
			if (wake > now + poll)
				wake = now + poll;
			tt_tick(e, 0);
		} else {
			atomic_store_explicit(&e->sleep_until, wake, memory_order_relaxed);
			tt_tick(e, LF_TW_SLEEPING | LF_TW_PRECISE);
			/* memory goes back before a long sleep only: a timer thread
			 * napping between ticks of a stream of fires would walk the
			 * depot each time and give back pages about to be used */
			if (wake - now >= TRIM_SLEEP_MIN) {
				lf_pool_trim(e);
				due_shrink(e);
			}
			lf_heavy_barrier(e);
			/* look everywhere once more: what arms published before they
			 * could see SLEEPING */
			int64_t w2 = wake;
			if (work_waiting(e, &w2) || w2 < wake) {
				tt->idle = 0;
				continue;
			}
			if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_FENCE &&
			    wake > now + poll)
				wake = now + poll; /* see lf_heavy_barrier */
			tt->idle = IDLE_ROUNDS;
		}
		if (atomic_load_explicit(&e->park_flag, memory_order_acquire) ||
		    atomic_load_explicit(&e->stop, memory_order_acquire))
			continue;
		lf_ec_wait(&e->wake_ec, v, wake);
	}
	return NULL;
}

/* ---- create / destroy ------------------------------------------------------------------ */

static void engine_free(struct tmo *e)
{
	lf_recs_free(e);
	if (e->tt_base != NULL)
		lf_base_free(e, e->tt_base);
	tmo__free(e->tt_rec);
	if (e->tt != NULL) {
		tmo__free(e->tt->due);
		tmo__free(e->tt->tmp);
		tmo__free(e->tt);
	}
	if (e->pool.arena != NULL)
		lf_pool_fini(e);
	tmo__free(e);
}

int lf_create(const struct lf_params *p, const struct tmo_config *cfg, struct tmo **out)
{
	struct tmo *e = tmo__aligned_alloc(64, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	memset(e, 0, sizeof *e);
	e->base.ops = p->ops;
	e->p = p;
	e->resolution_ns = cfg->resolution_ns > 0 ? cfg->resolution_ns : p->resolution_ns;
	/* the tick period scales with a configured resolution */
	e->tick_ns = p->tick_ns > 0 ? p->tick_ns * e->resolution_ns / p->resolution_ns : 0;
	if (p->tick_ns > 0 && e->tick_ns <= 0)
		e->tick_ns = 1;
	e->margin_ns = e->resolution_ns / 20 > 10000 ? e->resolution_ns / 20 : 10000;
	e->origin_ns = tmo_now_ns(); /* every base's tick grid starts here */
	ck_stack_init(&e->inbox);
	ck_ec32_init(&e->wake_ec, 0);
	ck_ec32_init(&e->done_ec, 0);
	int rc = TMO_ESYS;
	if (pthread_mutex_init(&e->rec_lock, NULL) != 0)
		goto fail_free;
	if (pthread_mutex_init(&e->park_lock, NULL) != 0)
		goto fail_rec;
	if (pthread_cond_init(&e->park_cv, NULL) != 0)
		goto fail_park;
	if ((rc = lf_pool_init(e)) != 0)
		goto fail_cv;
	lf_clock_init(e);
	rc = TMO_ENOMEM;
	e->tt = tmo__calloc(1, sizeof *e->tt);
	if (e->tt == NULL)
		goto fail_mem;
	e->tt->due_cap = DUE_FIRST;
	e->tt->due = tmo__malloc(DUE_FIRST * sizeof *e->tt->due);
	e->tt->tmp = tmo__malloc(DUE_FIRST * sizeof *e->tt->tmp);
	if (e->tt->due == NULL || e->tt->tmp == NULL)
		goto fail_mem;
	if ((e->tt_base = lf_base_new(e)) == NULL)
		goto fail_mem;
	if ((e->tt_rec = tmo__aligned_alloc(64, sizeof *e->tt_rec)) == NULL)
		goto fail_mem;
	memset(e->tt_rec, 0, sizeof *e->tt_rec);
	if ((rc = tmo__thread_create(&e->thread, NULL, timer_main, e)) != 0)
		goto fail_mem;
	lf_engine_register(e);
	*out = e;
	return 0;

fail_mem:
	pthread_cond_destroy(&e->park_cv);
	pthread_mutex_destroy(&e->park_lock);
	pthread_mutex_destroy(&e->rec_lock);
	engine_free(e);
	return rc;
fail_cv:
	pthread_cond_destroy(&e->park_cv);
fail_park:
	pthread_mutex_destroy(&e->park_lock);
fail_rec:
	pthread_mutex_destroy(&e->rec_lock);
fail_free:
	tmo__free(e);
	return rc;
}

/* Destroy: an arm still pending is cancelled, and its timer says so. */
static void cancel_left(struct tmo *e, struct lf_node *n)
{
	uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
	unsigned st = lf_st_of(s);
	if (st == LF_RING || st == LF_QUEUED || st == LF_IN_STRUCT)
		atomic_store_explicit(lf_timer_word(n->timer),
		                      lf_word(lf_idx_of(e, n), lf_gen_of(s), LF_CANCELLED_OUT),
		                      memory_order_release);
}

void lf_destroy(struct tmo *e)
{
	atomic_store_explicit(&e->stop, 1, memory_order_release);
	pthread_mutex_lock(&e->park_lock);
	pthread_cond_broadcast(&e->park_cv);
	pthread_mutex_unlock(&e->park_lock);
	lf_ec_wake(&e->wake_ec);
	pthread_join(e->thread, NULL);
	/* no thread exit touches our records after this */
	lf_engine_unregister(e);
	lf_pool_each(e, cancel_left);
	pthread_cond_destroy(&e->park_cv);
	pthread_mutex_destroy(&e->park_lock);
	pthread_mutex_destroy(&e->rec_lock);
	engine_free(e);
}

void lf_destroy_forked(struct tmo *e)
{
	/* The child has no timer thread; the parent's locks may have been
	 * held at fork time: free memory only. */
	lf_engine_unregister(e);
	engine_free(e);
}

/* ---- stats, park, debug ------------------------------------------------------------------ */

/* Arms, prevented cancels and fires from every counter (relaxed). */
static void lf_counts(struct tmo *e, uint64_t *armed_out, uint64_t *prevented_out,
                      uint64_t *fired_out)
{
	uint64_t armed = atomic_load_explicit(&e->armed_bare, memory_order_relaxed) +
	                 atomic_load_explicit(&e->tt_rec->head, memory_order_relaxed);
	uint64_t prevented = atomic_load_explicit(&e->prevented_bare, memory_order_relaxed) +
	                     atomic_load_explicit(&e->tt_rec->prevented, memory_order_relaxed);
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		armed += atomic_load_explicit(&r->head, memory_order_relaxed);
		prevented += atomic_load_explicit(&r->prevented, memory_order_relaxed);
	}
	*armed_out = armed;
	*prevented_out = prevented;
	*fired_out = atomic_load_explicit(&e->fired, memory_order_relaxed);
}

uint64_t lf_pending(struct tmo *e)
{
	uint64_t armed, prevented, fired;
	lf_counts(e, &armed, &prevented, &fired);
	return armed > fired + prevented ? armed - fired - prevented : 0;
}

int lf_stats(struct tmo *e, struct tmo_stats *out)
{
	uint64_t armed, prevented, fired;
	lf_counts(e, &armed, &prevented, &fired);
	out->pending = armed > fired + prevented ? armed - fired - prevented : 0;
	out->held_nodes = lf_pool_nodes(e);
	out->held_bytes = lf_pool_bytes(e) + atomic_load_explicit(&e->rec_bytes, memory_order_relaxed) +
	                  atomic_load_explicit(&e->tt->bytes, memory_order_relaxed);
	out->threads = 1;
	out->fired = fired;
	out->cancelled = prevented;
	return 0;
}

int lf_park(struct tmo *e, int on)
{
	pthread_mutex_lock(&e->park_lock);
	if (on) {
		e->park_req = 1;
		atomic_store_explicit(&e->park_flag, 1, memory_order_release);
		lf_ec_wake(&e->wake_ec);
		while (!e->parked)
			pthread_cond_wait(&e->park_cv, &e->park_lock);
	} else {
		e->park_req = 0;
		atomic_store_explicit(&e->park_flag, 0, memory_order_release);
		pthread_cond_broadcast(&e->park_cv);
	}
	pthread_mutex_unlock(&e->park_lock);
	return 0;
}

int lf_arm_on_timer(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                    void *arg)
{
	struct lf_rec *r = e->tt_rec;
	int err = TMO_ENOMEM;
	struct lf_node *n = r->cache;
	if (n == NULL && (n = lf_cache_refill(e, r, &err)) == NULL)
		return err;
	r->cache = n->free_next;
	r->cache_n--;
	uint64_t gen = (lf_gen_of(atomic_load_explicit(&n->state, memory_order_relaxed)) + 1) &
	               LF_GEN_MASK;
	n->timer = t;
	t->cb = cb;
	t->arg = arg;
	atomic_store_explicit(&n->aux, LF_IN_TT, memory_order_relaxed);
	if (e->p->sched->insert(lf_sched_of(e->tt_base), n, tmo_now_ns() + timeout_ns) != 0) {
		lf_cache_put(e, r, n);
		return TMO_ENOMEM;
	}
	atomic_store_explicit(&n->state, lf_st(gen, LF_IN_STRUCT), memory_order_release);
	atomic_store_explicit(lf_timer_word(t), lf_word(lf_idx_of(e, n), gen, LF_PENDING),
	                      memory_order_release);
	atomic_store_explicit(&r->head, atomic_load_explicit(&r->head, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
	return 0;
}

void lf_debug(struct tmo *e, struct lf_debug *out)
{
	memset(out, 0, sizeof *out);
	out->filed = atomic_load_explicit(&e->tt->filed, memory_order_relaxed);
	out->stolen = atomic_load_explicit(&e->tt->stolen, memory_order_relaxed);
	out->inbox = atomic_load_explicit(&e->tt->via_inbox, memory_order_relaxed);
	out->trims = atomic_load_explicit(&e->pool.trimmed_pages, memory_order_relaxed);
	out->precise = atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_PRECISE;
	out->cache_count = lf_my_cache_count(e);
	pthread_mutex_lock(&e->rec_lock);
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed))
		out->spilled += atomic_load_explicit(&r->spilled, memory_order_relaxed);
	pthread_mutex_unlock(&e->rec_lock);
}
