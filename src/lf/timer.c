/*
 * The timer thread of the lock-free core: its loop, and what it takes from
 * the producers (lf.h has the design; fire.c collects and fires,
 * engine.c creates and destroys).
 *
 * One round of the loop:
 *   1. publish a tick (clock.c), refresh the TSC calibration;
 *   2. steal every ring arm that could come due before the next round, and
 *      take the inbox: both are filed in the timer thread's own base;
 *   3. collect what is due from its base and every per-thread base (each
 *      try-locked; a busy one is retried a little later), sort by deadline;
 *      a wheel's tick is collected a little before it (Lead);
 *   4. run the callbacks, one at a time, stopping at once for destroy;
 *   5. sleep: one tick_ns while arms keep coming; else, after a few idle
 *      rounds, set LF_TW_SLEEPING, give back free pages, look everywhere
 *      once more (Dekker with arm, clock.c) and sleep until the earliest
 *      deadline or a wake-up.
 *
 * Order (guarantee 4) however late this thread runs.  A round fires only
 * what was due at its start (`now`, read before it steals and drains):
 * every arm made before that read is then in a ring (stolen), in the inbox
 * (drained), filed, or in transit in its owner's hands (from the owner's
 * CAS RING -> QUEUED until its push or filing), announced in its record
 * (lf_rec.transit) before that CAS; the round fires nothing due at or
 * after an announced node's deadline, and looks again shortly.  An arm
 * made later is due later than `now` (timeouts are not negative).  A
 * `now` read after a long drain (tens of thousands of nodes, a starved
 * thread: hundreds of ms) fired timers due after arms published during
 * the drain (issue 19); and an owner preempted mid-spill held a node the
 * round could not see.  Lateness grows instead; order holds.  An arm is
 * dated by a stamp taken before it is in its slot (or filed at once): it
 * too is announced, from before its stamp (a lower bound: the latest
 * tick's clock read plus its timeout) until it is there; the record is
 * read before its ring (an arm announced, then in its slot and cleared,
 * is seen in one or the other) and after it (a spill's announcement
 * precedes its CAS).  A base its owner holds is not waited for: the
 * round fires only what runs in order with anything the base may hold
 * (fire.c, busy_hold).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "clock.h"
#include "pool.h"
#include "depot.h"
#include "trim.h"
#include "base.h"
#include "fire.h"
#include "timer.h"
#include "hook.h"

#ifdef TMO_LF_TEST_HOOKS
tmo__lf_hook_fn *_Atomic tmo__lf_hook_transit;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_round;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_pair;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_owner_in;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_mem;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_trim_start;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_trim;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_fork_wait;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_refill;
#endif

/* How far ahead of the one it fires the firing loop fetches nodes (half
 * that for their timers): a burst's nodes and timers lie anywhere in
 * memory, one miss each. */
#define FIRE_AHEAD 16
/* Idle rounds (no arm anywhere, nothing in the inbox) before it sleeps. */
#define IDLE_ROUNDS 4
/* How often the TSC calibration is refreshed while rounds follow each
 * other (a round after a sleep always refreshes it). */
#define CAL_EVERY_NS (100 * TMO_NSEC_PER_USEC)
/* The least sleep ahead for which the timer thread gives memory back. */
#define TRIM_SLEEP_MIN (50 * TMO_NSEC_PER_MSEC)
/* How long after a spill woke it (depot.c) the timer thread trims: the
 * frees that follow in the same stream are given back with it.  And how
 * long it puts a trim off while arms are refused growth (pool.c). */
#define TRIM_DEFER (10 * TMO_NSEC_PER_MSEC)
/* A due array longer than this is rid of cancelled entries each round. */
#define DUE_COMPACT_MIN 64

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

static void retry_unfiled(struct tmo *e)
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
 * the thread never reads a node it has not won.  Returns 1 if it stole. */
static int steal_one(struct tmo *e, uint64_t w, struct lf_rec *r)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t gen = lf_word_gen(w);
	uint64_t s = lf_st(gen, LF_RING);
	/* acquire, when it finds the owner's CAS done: its record's transit
	 * announcement (Order, above) is then visible */
	if (atomic_load_explicit(&n->state, memory_order_acquire) != s ||
	    !atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_QUEUED),
	                                             memory_order_acq_rel, memory_order_acquire))
		return 0;
	/* reads the clock only for a stamp */
	file_tt(e, n, gen, tmo__lf_node_deadline(e, n, 0), r);
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

/* Walk every record: steal from rings, note activity, and lower *transit
 * to what an owner holds in transit (Order, above).  Returns 1 if any
 * thread armed since the last look, 2 if it also stole. */
static int steal_rings(struct tmo *e, int64_t *transit)
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
			if (w != 0 && steal_one(e, w, r))
				active |= 2;
		}
		/* after its ring, before the drain: a 0 written after the push
		 * comes with the push */
		transit_lower(r, transit);
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

/* ---- the loop ------------------------------------------------------------------------ */

/* After LF_TW_SLEEPING is visible: anything published before it that the
 * round missed?  Lowers *wake to the earliest base's next deadline. */
static int work_waiting(struct tmo *e, int64_t *wake)
{
	int64_t transit = INT64_MAX;
	if ((steal_rings(e, &transit) & 2) || ck_pr_load_ptr(&e->inbox.head) != NULL ||
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

/* The latest deadline a round at `now` may fire.  On a wheel a timer is
 * due at its tick, wherever it waits, so that every source releases one
 * tick's timers together. */
static inline int64_t due_by_of(const struct tmo *e, int64_t now)
{
	if (e->p->thread_bases)
		return now - (now - e->origin_ns) % e->resolution_ns - 1;
	return now;
}

/* Lead: how long before a wheel's tick the timer thread collects it.  A
 * tick's nodes are a linked list walked one miss at a time, and the share
 * of the next block the wheel re-files at each tick is as many again
 * (src/ds/wheel.c): at a million timers a second over 1 s, a round's
 * collect took 340-420 us of the 1 ms tick and the tick's callbacks ran
 * only after it (AMD EPYC VM).  So the round that collects a tick runs
 * `lead` before it, with its horizon `lead` ahead of its time, and the
 * tick's timers wait, collected and in order, in the due array until the
 * round at the tick fires them (fire_due fires nothing before its tick:
 * never early; a timer armed meanwhile for that tick lands on the
 * wheel's expired list, collected by that round: in order).  A round
 * that collected something sets the lead: twice the lesser of what it
 * and the last such round took up to the end of their collects (one
 * round preempted is not a heavy load), or an eighth less than before if
 * that is more, at most three quarters of a tick, and none under a
 * tenth of a tick.  (Lowered by every round instead, the lead shrank in
 * the rounds that woke for it: each found it smaller, slept again to its
 * new start, and the round that collected began too late, 0.33 ms after
 * the tick.  Kept however small, it cost a light load a second round a
 * tick, whose tick word and barrier reach the arming threads: the
 * service scenario's one worker served 6-17 % fewer requests a second.) */
static inline void lead_update(struct lf_tt *tt, int64_t began, int64_t resolution_ns)
{
	int64_t took = tmo_now_ns() - began, prev = tt->took;
	tt->took = took;
	if (prev < took)
		took = prev;
	int64_t lead = tt->lead - tt->lead / 8;
	if (took > 0 && 2 * took > lead)
		lead = 2 * took;
	if (lead > resolution_ns / 4 * 3)
		lead = resolution_ns / 4 * 3;
	tt->lead = lead >= resolution_ns / 10 ? lead : 0;
}

/* 3. collect, `lead` ahead of the round's time (Lead); returns what the
 * round may fire before (tmo__lf_collect_all). */
static int64_t collect_ahead(struct tmo *e, int64_t now, int64_t *wake)
{
	struct lf_tt *tt = e->tt;
	size_t had = tt->due_n;
	int64_t hold = tmo__lf_collect_all(e, now + tt->lead, tt->lead, wake);
	if (e->p->sched->wheel && tt->due_n > had)
		lead_update(tt, now, e->resolution_ns);
	return hold;
}

/* 4. fire, in deadline order, the due timers (tt->due, not empty) that are
 * due before `hold`; the rest wait in the due array for the next round, and
 * lower *wake to the first one's time.  Returns how many fired. */
static size_t fire_due(struct tmo *e, int64_t now, int64_t hold, int64_t *wake)
{
	struct lf_tt *tt = e->tt;
	tmo__lf_due_order(e);
	/* Handed-over timers may not be due yet: they wait here.  On a wheel a
	 * timer is due at its tick, wherever it waits, so that every source
	 * releases one tick's timers together. */
	int64_t due_by = due_by_of(e, now);
#ifdef TMO_LF_PLANT_LEAD_EARLY /* tests/hooked/lf_lead.c must catch it */
	due_by = due_by_of(e, now + tt->lead); /* the collect's horizon */
#endif
	if (hold > due_by + 1)
		hold = due_by + 1;
	size_t k = 0;
	for (; k < tt->due_n && tt->due[k].deadline < hold; k++) {
		if (atomic_load_explicit(&e->stop, memory_order_acquire))
			break; /* destroy cancels the rest */
		if (k + FIRE_AHEAD < tt->due_n) {
			__builtin_prefetch(tt->due[k + FIRE_AHEAD].n, 1);
			__builtin_prefetch(tt->due[k + FIRE_AHEAD / 2].timer, 1);
		}
		tmo__lf_fire(e, &tt->due[k]);
	}
	memmove(tt->due, tt->due + k, (tt->due_n - k) * sizeof *tt->due);
	tt->due_n -= k;
	tt->sorted = tt->due_n;
	if (tt->due_n > 0) {
		int64_t d = tt->due[0].deadline, at = d;
		if (e->p->thread_bases && (d - e->origin_ns) % e->resolution_ns != 0)
			at = d + e->resolution_ns - (d - e->origin_ns) % e->resolution_ns;
		if (at < *wake)
			*wake = at;
	}
	return k;
}

/* 5, before a long sleep until *wake: publish LF_TW_SLEEPING, give memory
 * back, and look once more for work published before arms could see it.
 * Returns 0 when there is work (the loop runs another round at once), 1 to
 * sleep until *wake. */
static int announce_sleep(struct tmo *e, int64_t now, int64_t poll, int64_t *wake)
{
	struct lf_tt *tt = e->tt;
	/* memory goes back before a long sleep only: a timer thread napping
	 * between ticks of a stream of fires would walk the depot each time and
	 * give back pages about to be used; and not while arms are refused
	 * growth (pool.c, pressed): it waits TRIM_DEFER and looks again.  A
	 * sleep comes between refusals too (both of mpsc's producers preempted,
	 * or refused and retrying): trimmed then, the pages went back and were
	 * populated again at once, and what refills grew while the trim held
	 * the depot (pool.c, may_grow) came on top of the pool's bound
	 * (tests/hooked/lf_press.c) */
	int trim = 0;
	if (*wake - now >= TRIM_SLEEP_MIN) {
		if (tt->trim_at == 0 && atomic_load_explicit(&e->pool.trim_asked, memory_order_relaxed))
			tt->trim_at = now + TRIM_DEFER; /* woken by a spill: trim later */
		if (tt->trim_at != 0 && now < tt->trim_at) {
			*wake = tt->trim_at;
		} else if (atomic_exchange_explicit(&e->pool.pressed, 0, memory_order_relaxed)
#ifdef TMO_LF_PLANT_TRIM_PRESSED /* tests/hooked/lf_press.c must catch it */
		           && 0
#endif
		) {
			tt->trim_at = now + TRIM_DEFER; /* arms still refused: later */
			*wake = tt->trim_at;
		} else {
			trim = 1;
		}
	}
	atomic_store_explicit(&e->sleep_until, *wake, memory_order_relaxed);
	tmo__lf_tick_publish(e, LF_TW_SLEEPING);
	if (trim) {
		tt->trim_at = 0;
		tmo__lf_pool_trim(e);
		tmo__lf_due_shrink(e);
	}
	tmo__lf_heavy_barrier(e);
	/* look everywhere once more: what arms published before they could see
	 * SLEEPING */
	int64_t w2 = *wake;
	if (work_waiting(e, &w2) || w2 < *wake) {
		tt->idle = 0;
		return 0;
	}
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_FENCE &&
	    *wake > now + poll)
		*wake = now + poll; /* see tmo__lf_heavy_barrier */
	tt->idle = IDLE_ROUNDS;
	return 1;
}

void *tmo__lf_timer_main(void *arg)
{
	struct tmo *e = arg;
	struct lf_tt *tt = e->tt;
	tmo__thread_enter(e, e->p->ops->name);
	/* wake-ups are what the resolution is made of: no slack on them */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	for (;;) {
		if (LF_UNLIKELY(tmo__park_requested(&e->park))) {
			tmo__lf_tick_publish(e, 0);
			tmo__park_point(&e->park);
			tt->last_cal = 0; /* time went by: the next round calibrates */
		}
		if (LF_UNLIKELY(atomic_load_explicit(&e->stop, memory_order_acquire)))
			break;

		/* 1, 2. tick, steal, drain */
		int64_t now = tmo__lf_tick_publish(e, 0);
		if (now - tt->last_cal >= CAL_EVERY_NS) {
			tmo__lf_cal_update(e);
			tt->last_cal = now;
		}
		int64_t wake = INT64_MAX, transit = INT64_MAX;
		int active = steal_rings(e, &transit);
		active |= drain_inbox(e);
		if (LF_UNLIKELY(tt->unfiled != NULL))
			retry_unfiled(e);
		LF_HOOK(round, e);

		/* 3, 4. collect and fire: what was due at `now` (before the steal,
		 * see Order), before what a busy base may hold (fire.c,
		 * busy_hold) and before every node in transit; the rest waits (in
		 * the due array) for the next round */
		/* planted defects (tests/hooked/lf_order.c, which catches each;
		 * tests/harness/starve.sh): the round's bound read after the
		 * drain (NOW), nodes in transit not waited for (TRANSIT);
		 * TMO_LF_PLANT_ORDER plants both */
#if defined(TMO_LF_PLANT_ORDER) || defined(TMO_LF_PLANT_ORDER_NOW)
		now = tmo_now_ns();
#endif
#if defined(TMO_LF_PLANT_ORDER) || defined(TMO_LF_PLANT_ORDER_TRANSIT)
		transit = INT64_MAX;
#endif
		int64_t hold = collect_ahead(e, now, &wake);
		if (transit < hold)
			hold = transit;
		if (tt->due_n > DUE_COMPACT_MIN)
			tmo__lf_due_compact(e);
		if (tt->due_n > 0 && fire_due(e, now, hold, &wake) > 0) {
			tt->idle = 0;
			continue; /* callbacks took time: look again */
		}

		/* 5. sleep */
		if (tt->unfiled != NULL && wake > now + TMO_NSEC_PER_MSEC)
			wake = now + TMO_NSEC_PER_MSEC;
		int64_t poll = e->tick_ns > 0 ? e->tick_ns : e->resolution_ns;
		if (transit != INT64_MAX && tt->due_n > 0 && tt->due[0].deadline <= due_by_of(e, now)) {
			/* due timers wait for an owner, maybe preempted: nap one
			 * poll (not spin on its CPU), then look again (timers
			 * collected ahead, Lead, are not due yet: they wake it) */
			int64_t at = tmo_now_ns() + poll;
			if (wake < at)
				wake = at;
		}
		tt->idle = active || tmo__timely_timer() ? 0 : tt->idle + 1;
		uint32_t v = tmo__lf_ec_value(&e->wake_ec);
		if (tt->idle < IDLE_ROUNDS) {
			/* arms keep coming: look again in one tick */
			if (wake > now + poll)
				wake = now + poll;
		} else if (!announce_sleep(e, now, poll, &wake)) {
			continue;
		}
		if (tmo__park_requested(&e->park) || atomic_load_explicit(&e->stop, memory_order_acquire))
			continue;
		tmo__lf_ec_wait(&e->wake_ec, v, wake);
	}
	return NULL;
}
