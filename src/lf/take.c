/*
 * What the timer thread of the lock-free core takes from the producers
 * (lf.h has the design; timer.c runs the rounds that call these): the
 * arms still in the threads' rings, which it steals, and the inbox, which
 * it drains; both are filed in its own base.
 */
#include "clock.h"
#include "pool.h"
#include "depot.h"
#include "base.h"
#include "take.h"

/* ---- filing (timer thread) -------------------------------------------------------- */

/* A QUEUED node we hold goes into our base (or waits on `unfiled`);
 * `home`: the record whose ring it came from, or NULL (its aux names it:
 * a cancel's free goes back there, depot.c, Homes). */
static void file_tt(struct tmo *e, struct lf_node *n, uint64_t gen, int64_t deadline,
                    struct lf_rec *home)
{
	const struct lf_sched *sc = e->p->sched;
	atomic_store_explicit(&n->aux, (uintptr_t)home | LF_IN_TT, memory_order_relaxed);
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
		tmo__lf_tt_free(e, n);
	}
}

void tmo__lf_retry_unfiled(struct tmo *e)
{
	struct lf_node *n = e->tt->unfiled;
	e->tt->unfiled = NULL;
	while (n != NULL) {
		struct lf_node *next = n->free_next;
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		if (lf_st_of(s) == LF_DROPPED)
			tmo__lf_tt_free(e, n);
		else
			file_tt(e, n, lf_gen_of(s), n->s.unfiled.when,
			        tmo__lf_home_of(atomic_load_explicit(&n->aux, memory_order_relaxed)));
		n = next;
	}
}

/* ---- steal and drain ---------------------------------------------------------------- */

/* Steal a ring arm.  Every arm still in a ring when the timer thread looks
 * is taken: an arm that lives longer than a tick gains nothing from staying
 * (its cancel then costs a CAS and a trip through the base either way), and
 * the thread never reads a node it has not won.  Returns 1 if it stole,
 * and lowers *earliest to the stolen arm's deadline. */
static int steal_one(struct tmo *e, uint64_t w, struct lf_rec *r, int64_t *earliest)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t gen = lf_word_gen(w);
	uint64_t s = lf_st(gen, LF_RING);
	/* acquire, when it finds the owner's CAS done: its record's transit
	 * announcement (timer.c, Order) is then visible */
	if (atomic_load_explicit(&n->state, memory_order_acquire) != s ||
	    !atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_QUEUED),
	                                             memory_order_acq_rel, memory_order_acquire))
		return 0;
	/* reads the clock only for a stamp */
	int64_t deadline = tmo__lf_node_deadline(e, n, 0);
	file_tt(e, n, gen, deadline, r);
	if (deadline < *earliest)
		*earliest = deadline;
	atomic_fetch_add_explicit(&e->tt->stolen, 1, memory_order_relaxed);
	return 1;
}

/* Lower *transit to what r's owner announces it holds (0: nothing). */
static inline void transit_lower(struct lf_rec *r, int64_t *transit)
{
	int64_t t = atomic_load_explicit(&r->transit, memory_order_acquire);
	if (t != 0 && t < *transit)
		*transit = t;
}

/* Walk every record: steal from rings, note activity, lower *transit to
 * what an owner holds in transit (timer.c, Order) and *earliest to the
 * deadline of the earliest arm stolen.  Returns 1 if any thread armed
 * since the last look, or it stole. */
int tmo__lf_steal_rings(struct tmo *e, int64_t *transit, int64_t *earliest)
{
	int active = 0;
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		uint64_t armed = atomic_load_explicit(&r->head, memory_order_relaxed);
		if (armed != r->seen_head) {
			r->seen_head = armed;
			active = 1;
		}
		/* before its ring: an arm announced before its stamp and cleared
		 * after its slot store is here, or in the slot read below */
		transit_lower(r, transit);
		for (uint32_t i = 0; i < LF_RING_SLOTS; i++) {
			uint64_t w = atomic_load_explicit(&r->ring[i], memory_order_acquire);
			if (w != 0 && steal_one(e, w, r, earliest))
				active = 1;
		}
		/* after its ring, before the drain: a 0 written after the push
		 * comes with the push */
		transit_lower(r, transit);
	}
	return active;
}

/* Take the inbox, oldest first (equal deadlines keep their arm order).
 * Returns 1 if it held anything. */
int tmo__lf_drain_inbox(struct tmo *e)
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
			tmo__lf_tt_free(e, n);
			continue;
		}
		/* a wheel's arm the long way (its base was busy, its thread's
		 * exit) names its base, whose owner is its home */
		file_tt(e, n, lf_gen_of(s), tmo__lf_node_deadline(e, n, later),
		        tmo__lf_home_of(atomic_load_explicit(&n->aux, memory_order_relaxed)));
		atomic_fetch_add_explicit(&e->tt->via_inbox, 1, memory_order_relaxed);
	}
	return 1;
}
