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
 *   5. sleep: one tick_ns while near arms keep coming; else, after a few
 *      idle rounds, set LF_TW_SLEEPING, give back free pages, look
 *      everywhere once more (Dekker with arm, ec.c) and sleep until the
 *      earliest deadline or a wake-up (Lazy).
 *
 * Lazy.  Arms that keep coming, all far (held timeouts cancelled long
 * before they are due, the seed's 1 s), need no round before the earliest
 * deadline: an arm made while the thread sleeps wakes it only if due
 * before its wake-up (arm.c, arm_asleep).  Only near arms (stolen due
 * within lf_lazy_ns) or the inbox keep it polling; far ones alone let it
 * sleep, at most lf_lazy_ns (the arms' stamps stay fresh).  Polling while
 * any arm came, mpsc's thread was on a CPU 20-22.5 % of the time beside
 * one thread arming 1 s timeouts, the wheel's 4-5 % (docs/lockfree.md).
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
#include "take.h"
#include "timer.h"
#include "hook.h"

#ifdef TMO_LF_TEST_HOOKS
tmo__lf_hook_fn *_Atomic tmo__lf_hook_transit;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_round;
tmo__lf_hook_fn *_Atomic tmo__lf_hook_woke;
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
/* Idle rounds (no near arm, nothing in the inbox) before it sleeps. */
#define IDLE_ROUNDS 4
/* While arms keep coming it sleeps only for this many polls or more (its
 * sleep costs the arming threads a barrier, membarrier's IPI). */
#define LAZY_MIN_POLLS 4
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


/* ---- the loop ------------------------------------------------------------------------ */

/* After LF_TW_SLEEPING is visible: anything published before it that the
 * round missed?  Lowers *wake to the earliest base's next deadline, and
 * *stolen to the deadline of the earliest ring arm it stole and filed. */
static int work_waiting(struct tmo *e, int64_t *wake, int64_t *stolen)
{
	int64_t transit = INT64_MAX;
	tmo__lf_steal_rings(e, &transit, stolen);
	if (ck_pr_load_ptr(&e->inbox.head) != NULL || ck_pr_load_ptr(&e->tt_base->cancels.head) != NULL)
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
	int64_t w2 = *wake, stolen = INT64_MAX;
	/* A ring arm stolen here is filed in our own base: a round a
	 * resolution before it is due collects it in time (Lead is under a
	 * resolution).  While arms keep coming, all far (Lazy, above), the
	 * look most often steals an arm its owner is about to cancel: a round
	 * at once for it found another such arm before the next sleep, and
	 * the thread never slept. */
	int64_t stolen_by = INT64_MAX;
	if (work_waiting(e, &w2, &stolen) || w2 < *wake ||
	    (stolen != INT64_MAX && (stolen_by = stolen - e->resolution_ns) <= now)) {
		tt->idle = 0;
		return 0;
	}
	if (stolen_by < *wake) { /* earlier than published: arms may wake it for nothing */
		*wake = stolen_by;
		atomic_store_explicit(&e->sleep_until, *wake, memory_order_relaxed);
	}
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_FENCE &&
	    *wake > now + poll)
		*wake = now + poll; /* see tmo__lf_heavy_barrier */
	tt->idle = IDLE_ROUNDS;
	return 1;
}

/* 5: until when the thread sleeps (*wake: what its bases and due array
 * want), polling or announced (Lazy, above); `active`: arms came, `near`:
 * arms due soon did, or the inbox held some.  Returns 0 when there is work
 * at once. */
static int sleep_plan(struct tmo *e, int64_t now, int64_t transit, int active, int near,
                      int64_t *wake)
{
	struct lf_tt *tt = e->tt;
	if (tt->unfiled != NULL && *wake > now + TMO_NSEC_PER_MSEC)
		*wake = now + TMO_NSEC_PER_MSEC;
	int64_t poll = e->tick_ns > 0 ? e->tick_ns : e->resolution_ns;
	if (transit != INT64_MAX && tt->due_n > 0 && tt->due[0].deadline <= due_by_of(e, now)) {
		/* due timers wait for an owner, maybe preempted: nap one poll
		 * (not spin on its CPU), then look again (timers collected
		 * ahead, Lead, are not due yet: they wake it) */
		int64_t at = tmo_now_ns() + poll;
		if (*wake < at)
			*wake = at;
	}
	tt->idle = near || tmo__timely_timer() ? 0 : tt->idle + 1;
	if (tt->idle < IDLE_ROUNDS || (active && *wake - now < LAZY_MIN_POLLS * poll)) {
		/* near arms keep coming, or work soon: look again in one tick */
		if (*wake > now + poll)
			*wake = now + poll;
		return 1;
	}
	if (active && *wake > now + lf_lazy_ns(e))
		*wake = now + lf_lazy_ns(e); /* keep the calibration fresh */
	return announce_sleep(e, now, poll, wake);
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
		int64_t wake = INT64_MAX, transit = INT64_MAX, stolen = INT64_MAX;
		int active = tmo__lf_steal_rings(e, &transit, &stolen);
		int near = tmo__lf_drain_inbox(e);
		if (LF_UNLIKELY(tt->unfiled != NULL))
			tmo__lf_retry_unfiled(e);
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
		uint32_t v = tmo__lf_ec_value(&e->wake_ec);
		if (!sleep_plan(e, now, transit, active, near || stolen < now + lf_lazy_ns(e), &wake))
			continue;
		if (tmo__park_requested(&e->park) || atomic_load_explicit(&e->stop, memory_order_acquire))
			continue;
		tmo__lf_ec_wait(&e->wake_ec, v, wake);
		LF_HOOK(woke, e);
	}
	return NULL;
}
