/*
 * The filing a holder of a base does: an arm that outlived its ring slot
 * leaves it for its owner's base (wheel) or the inbox (mpsc), what a busy
 * base's next holder finds on its stacks, and what an owner hands to the
 * timer thread because it comes due soon; a base's making and freeing, and
 * the inbox's push (lf.h has the design; arm.c the arm's fast path and
 * its fused copy of the common filing, spill_own).
 */
#include <string.h>

#include "clock.h"
#include "pool.h"
#include "depot.h"
#include "base.h"
#include "hook.h"

/* ---- bases ---------------------------------------------------------------------- */

struct lf_base *tmo__lf_base_new(struct tmo *e)
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

void tmo__lf_base_free(struct tmo *e, struct lf_base *b)
{
	e->p->sched->fini(lf_sched_of(b));
	tmo__free(b);
}

/* ---- publishing: the inbox ------------------------------------------------------ */

void tmo__lf_inbox_post(struct tmo *e, struct lf_node *n)
{
	/* read before the push: once in the inbox the node may be filed, and
	 * these fields written over */
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	int64_t timeout = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
	ck_stack_push_upmc(&e->inbox, &n->link);
	uint64_t in = atomic_fetch_add_explicit(&e->inbox_in, 1, memory_order_relaxed) + 1;
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING) {
		/* A sleeping timer thread need not wake for a late deadline, but
		 * a backlog it has not taken holds nodes (and nears INBOX_MAX,
		 * where arms are refused): past INBOX_WAKE it wakes anyway.  The
		 * deadline's bound is worked out here only (a conversion). */
		int64_t deadline_lower = 0;
		if (in - atomic_load_explicit(&e->inbox_out, memory_order_relaxed) < INBOX_WAKE)
			deadline_lower = tmo__lf_node_deadline_lower(e, stamp, timeout);
		tmo__lf_wake_for(e, deadline_lower);
	}
}

/* ---- filing ----------------------------------------------------------------------- */

/* A lower bound on the deadline of a node its holder has in transit
 * (timer.c, Order: what the owner announces while it spills). */
static int64_t deadline_lower(struct tmo *e, struct lf_node *n)
{
	return tmo__lf_node_deadline_lower(e, atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed),
	                                   atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed));
}

/* A node the holder of a base removed after its cancel: the owner's to
 * its cache, the timer thread's back to the thread that armed it. */
static void free_to(struct tmo *e, struct lf_rec *r, struct lf_node *n)
{
	if (r == e->tt_rec)
		tmo__lf_tt_free(e, n);
	else if (r != NULL)
		lf_cache_put(e, r, n);
	else
		tmo__lf_free_bare(e, n);
}

/* Holder of b: file a node it holds in transit (QUEUED), or free it if a
 * cancel dropped it on the way.  `later`: a clock reading after its arm,
 * or 0 (read one if needed). */
static void base_file_locked(struct tmo *e, struct lf_base *b, struct lf_node *n, int64_t later,
                             struct lf_rec *r)
{
	const struct lf_sched *sc = e->p->sched;
	uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
	if (lf_st_of(s) == LF_QUEUED) {
		int64_t deadline = tmo__lf_node_deadline(e, n, later);
		/* `next` first: a timer thread that finds the base busy holds back
		 * what is due after `next` less what its tick and the dating may
		 * hide (fire.c, busy_hold), which may be earlier than the base's
		 * first deadline, never later */
		if (deadline < atomic_load_explicit(&b->next, memory_order_relaxed))
			atomic_store_explicit(&b->next, deadline, memory_order_release);
		atomic_store_explicit(&n->aux, (uintptr_t)b | LF_IN_THREAD, memory_order_relaxed);
		sc->insert(lf_sched_of(b), n, deadline); /* a wheel never refuses */
		if (atomic_compare_exchange_strong_explicit(&n->state, &s,
		                                            lf_st(lf_gen_of(s), LF_IN_STRUCT),
		                                            memory_order_acq_rel, memory_order_acquire))
			return;
		sc->remove(lf_sched_of(b), n);
	}
	free_to(e, r, n); /* DROPPED on the way: the holder frees it */
}

void tmo__lf_base_tidy(struct tmo *e, struct lf_base *b, struct lf_rec *r)
{
	const struct lf_sched *sc = e->p->sched;
	/* looked at before it is taken: an exchange would own the line for
	 * nothing on nearly every filing */
	ck_stack_entry_t *l = ck_pr_load_ptr(&b->cancels.head) != NULL
	                          ? ck_stack_batch_pop_upmc(&b->cancels)
	                          : NULL;
	while (l != NULL) {
		ck_stack_entry_t *next = l->next;
		struct lf_node *n = lf_node_of_link(l);
		if (sc->contains(n))
			sc->remove(lf_sched_of(b), n);
		free_to(e, r, n);
		l = next;
	}
	if (ck_pr_load_ptr(&b->tofile.head) == NULL)
		return;
	l = ck_stack_batch_pop_upmc(&b->tofile);
	int64_t later = tmo_now_ns(); /* after every arm in the chain */
	ck_stack_entry_t *rev = NULL;
	while (l != NULL) { /* oldest first */
		ck_stack_entry_t *next = l->next;
		l->next = rev;
		rev = l;
		l = next;
	}
	while (rev != NULL) {
		struct lf_node *n = lf_node_of_link(rev);
		rev = rev->next; /* before filing: a cancel may push it again */
		base_file_locked(e, b, n, later, r);
	}
}

struct soon_chain {
	struct lf_base *b;
	struct lf_node *head, *tail;
};

static void soon_add(void *ctx, struct lf_node *n)
{
	struct soon_chain *c = ctx;
	uint64_t s = atomic_load_explicit(&n->state, memory_order_relaxed);
	/* a node whose cancel won is out of the wheel now: its canceller (or
	 * the base's next holder, from the cancel stack) frees it */
	if (lf_st_of(s) != LF_IN_STRUCT ||
	    !atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(lf_gen_of(s), LF_QUEUED),
	                                             memory_order_acq_rel, memory_order_relaxed))
		return;
	n->s.soon.next = NULL;
	if (c->tail != NULL)
		c->tail->s.soon.next = n;
	else
		c->head = n;
	c->tail = n;
}

/* Holder of b, owner: hand what is due by `horizon` to the timer thread. */
static void base_hand_off(struct tmo *e, struct lf_base *b, int64_t horizon)
{
	const struct lf_sched *sc = e->p->sched;
	struct soon_chain c = {b, NULL, NULL};
	sc->collect(lf_sched_of(b), horizon, SIZE_MAX, soon_add, &c);
	if (c.head != NULL) {
		struct lf_node *old = atomic_load_explicit(&b->soon, memory_order_relaxed);
		do
			c.tail->s.soon.next = old;
		while (!atomic_compare_exchange_weak_explicit(&b->soon, &old, c.head,
		                                              memory_order_release,
		                                              memory_order_relaxed));
	}
	/* After the push: the timer thread reads `next`, then takes the list;
	 * seeing this value it sees the list too. */
	atomic_store_explicit(&b->next, sc->next_deadline(lf_sched_of(b)), memory_order_release);
}

/* The latest tick's clock reading: a `now` no later than now. */
static inline int64_t coarse_now(struct tmo *e)
{
	return atomic_load_explicit(&e->tick_at, memory_order_relaxed);
}

/* After a filing into our own base: hand what comes due soon to the timer
 * thread, and say when the base wants it to look (0: at once). */
int64_t tmo__lf_base_release(struct tmo *e, struct lf_base *b, struct lf_rec *r)
{
	if (ck_pr_load_ptr(&b->cancels.head) != NULL || ck_pr_load_ptr(&b->tofile.head) != NULL)
		tmo__lf_base_tidy(e, b, r);
	/* While this thread keeps spilling it hands what comes due soon to
	 * the timer thread itself: that thread need not take the lock
	 * (which would send our spills the long way meanwhile). */
	int64_t horizon = coarse_now(e) + LF_SOON_NS;
	if (atomic_load_explicit(&b->next, memory_order_relaxed) <= horizon)
		base_hand_off(e, b, horizon);
	int64_t wake_at = atomic_load_explicit(&b->next, memory_order_relaxed);
	if (atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)
		wake_at = 0;
	lf_base_own_unlock(b);
	return wake_at;
}

static void wake_if_sleeping(struct tmo *e, int64_t wake_at)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		tmo__lf_wake_for(e, wake_at);
}

/* File a node we took out of our ring (QUEUED) in our own base.  With the
 * base busy (the timer thread collecting from it) the node waits on its
 * tofile stack for the next holder: its owner's next filing, or the timer
 * thread, which looks at every such stack. */
static void file_own_base(struct tmo *e, struct lf_rec *r, struct lf_node *n)
{
	struct lf_base *b = r->base;
	int64_t wake_at = 0;
	if (lf_base_own_trylock(e, b)) {
		base_file_locked(e, b, n, 0, r);
		wake_at = tmo__lf_base_release(e, b, r);
	} else {
		/* dated now: the calibration its next holder finds may be newer */
		int64_t deadline = tmo__lf_node_deadline(e, n, 0);
		atomic_store_explicit(&n->s.q.timeout, deadline, memory_order_relaxed);
		atomic_store_explicit(&n->s.q.stamp, LF_STAMP_DEADLINE, memory_order_relaxed);
		ck_stack_push_upmc(&b->tofile, &n->link);
	}
	wake_if_sleeping(e, wake_at);
}

/* The ring arm (n, gen) goes straight into our own base, held: one CAS
 * RING -> IN_STRUCT, no transit.  Its aux already names the base (arm
 * wrote it), so a canceller that wins the node next finds it; until the
 * node is in the wheel only we hold the base, and a cancel that comes
 * between (another thread's: CANCEL_PENDING, on the cancel stack) is
 * undone by the tidy after the insert.  Returns 0 when the node was no
 * longer in the ring (*s: its state). */
static int file_from_ring(struct tmo *e, struct lf_rec *r, struct lf_node *n, uint64_t *s)
{
	struct lf_base *b = r->base;
	if (!atomic_compare_exchange_strong_explicit(&n->state, s,
	                                             lf_st(lf_gen_of(*s), LF_IN_STRUCT),
	                                             memory_order_acq_rel, memory_order_acquire))
		return 0;
	LF_HOOK(transit, e);
	/* we own the fields until the insert */
	int64_t deadline = tmo__lf_node_deadline_own(e, r, n);
	if (deadline < atomic_load_explicit(&b->next, memory_order_relaxed))
		atomic_store_explicit(&b->next, deadline, memory_order_release);
	tmo__wheel_add(lf_own_wheel(b), &n->s.wheel, deadline);
	return 1;
}

/* A slot of our ring is needed again (or we detach) while it holds arm w:
 * spill the arm if it is still in the ring, reclaim the node if another
 * thread's cancel took the arm back, else (the timer thread stole it)
 * leave it. */
void tmo__lf_ring_evict(struct tmo *e, struct lf_rec *r, uint64_t w)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t gen = lf_word_gen(w);
	uint64_t s = lf_st(gen, LF_RING);
	/* Announced before the CAS (timer.c, Order): a timer thread that finds
	 * the CAS done finds this too.  Its deadline (1: unknown yet) once the
	 * CAS won: the node may have moved on before.  Filed straight from the
	 * ring into our own base, it stays unknown until the insert is done. */
	atomic_store_explicit(&r->transit, 1, memory_order_relaxed);
	if (r->base != NULL && lf_base_own_trylock(e, r->base)) {
		if (file_from_ring(e, r, n, &s)) {
			lf_bump(&r->spilled);
			int64_t wake_at = tmo__lf_base_release(e, r->base, r);
			atomic_store_explicit(&r->transit, 0, memory_order_release);
			wake_if_sleeping(e, wake_at);
			return;
		}
		lf_base_own_unlock(r->base);
	} else if (atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_QUEUED),
	                                                   memory_order_acq_rel,
	                                                   memory_order_acquire)) {
		int64_t lower = deadline_lower(e, n);
		if (lower > 0)
			atomic_store_explicit(&r->transit, lower, memory_order_relaxed);
		LF_HOOK(transit, e);
		lf_bump(&r->spilled);
		if (r->base != NULL)
			file_own_base(e, r, n);
		else
			tmo__lf_inbox_post(e, n);
		atomic_store_explicit(&r->transit, 0, memory_order_release);
		return;
	}
	atomic_store_explicit(&r->transit, 0, memory_order_release);
	if (s == lf_st(gen, LF_CANCELLED))
		lf_cache_put(e, r, n);
}

