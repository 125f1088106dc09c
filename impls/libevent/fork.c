/*
 * The libevent engine and fork() (impls/libevent.c has the rest of the
 * design).
 *
 * fork().  In the child the engine thread does not exist and the core
 * refuses every call (TMO_EFORKED); destroy_forked frees the child's copy.
 * That needs libevent's base lock (a recursive mutex a parent thread may
 * have held at the fork, and then no thread of the child ever releases it),
 * and event_base_free() alone would also remove the notify and timer
 * descriptors from the epoll set the child shares with the parent, whose
 * loop would then never wake again.  So a pthread_atfork prepare handler
 * quiesces every libevent engine before the fork: it asks the engine thread
 * to stop at a point where it holds no libevent lock (the end of a
 * callback, or inside the control event's callback, which libevent runs
 * without its lock), takes the engine mutex `m` (every call into libevent
 * from an application thread is made under it, except a cancel's
 * event_del, which is counted in `outside` and waited for), and records
 * whether all that happened within FORK_QUIESCE_NS (a callback that runs
 * longer, or a parked engine, is not quiesced).  The parent and child
 * handlers release them.  So fork() waits, per libevent engine, for a
 * wake-up of its thread or the end of its running callback, at most
 * FORK_QUIESCE_NS.  In a child forked from a quiesced engine,
 * destroy_forked calls event_reinit() (a new epoll set and new notify
 * descriptors for the child; the inherited ones are only closed, never
 * removed from the parent's set) and then event_base_free(), and frees the
 * records.  From an engine that was not quiesced it frees only what the
 * engine allocated itself and leaves libevent's base and its descriptors in
 * the child, untouched.  The count costs a cancel that prevents its timer
 * two atomic read-modify-writes.  A callback that forks returns, in the
 * child, into a copy of the engine thread that is the child's only thread:
 * it ends there (the child exits 0) instead of running the inherited loop
 * on descriptors the parent shares.
 */
#include <event2/event.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "libevent.h"

/* How long the fork handler waits for an engine to quiesce. */
#define FORK_QUIESCE_NS TMO_NSEC_PER_SEC

/* ---- calls into libevent without the engine mutex ------------------------ */

/* Entered with m held (so the fork handler, which takes m, sees the count),
 * left without it.  Dekker pair with fork_prepare: leaving decrements then
 * reads fork_waiting; the handler sets fork_waiting then reads the count
 * (seq_cst), so one of them sees the other. */
void tmo__lev_outside_enter(struct tmo *e) { atomic_fetch_add(&e->outside, 1); }

void tmo__lev_outside_leave(struct tmo *e)
{
	if (atomic_fetch_sub(&e->outside, 1) == 1 && atomic_load(&e->fork_waiting)) {
		pthread_mutex_lock(&e->gm);
		pthread_cond_broadcast(&e->gcv);
		pthread_mutex_unlock(&e->gm);
	}
}

/* Where the engine thread holds while a fork is prepared: called where it
 * holds no libevent lock and not `m` (end of lev_fire, the control event's
 * callback). */
void tmo__lev_fork_point(struct tmo *e)
{
	if (!atomic_load_explicit(&e->fork_req, memory_order_acquire))
		return;
	pthread_mutex_lock(&e->park.mu);
	if (atomic_load(&e->fork_req)) {
		e->fork_held = true;
		pthread_cond_broadcast(&e->park.cv);
		while (atomic_load(&e->fork_req))
			pthread_cond_wait(&e->park.cv, &e->park.mu);
		e->fork_held = false;
	}
	pthread_mutex_unlock(&e->park.mu);
}

/* ---- fork ------------------------------------------------------------------- */

/* Live engines.  tmo__lev_forks.mu is held across the fork (prepare to parent/child),
 * and around event_base_new/free, which take libevent's global signal lock. */
TMO__FORK_SET(, tmo__lev_forks, fork_prepare, fork_release, fork_release);

static void fork_prepare(void)
{
	pthread_mutex_lock(&tmo__lev_forks.mu);
	int64_t end = tmo_now_ns() + FORK_QUIESCE_NS;
	struct timespec ts = tmo__ts_from_ns(end);
	/* pthread_mutex_timedlock takes CLOCK_REALTIME (ThreadSanitizer does
	 * not know pthread_mutex_clocklock); a clock step only moves the bound. */
	struct timespec rts;
	clock_gettime(CLOCK_REALTIME, &rts);
	rts.tv_sec += FORK_QUIESCE_NS / TMO_NSEC_PER_SEC;
	/* 1. Ask every engine thread to hold (all first, then wait for each). */
	tmo_list_for_each(e, &tmo__lev_forks.engines, struct tmo, fork_link) {
		e->fork_safe = false;
		if (tmo__thread_engine == e)
			continue; /* forking from its own callback: it holds nothing */
		pthread_mutex_lock(&e->park.mu);
		/* A parked thread holds the base lock (event_active would wait
		 * for it): not quiesced. */
		bool parked = e->park.parked || tmo__park_requested(&e->park);
		if (!parked)
			atomic_store(&e->fork_req, 1);
		pthread_mutex_unlock(&e->park.mu);
		if (!parked)
			event_active(e->ctl, EV_TIMEOUT, 1);
	}
	tmo_list_for_each(e, &tmo__lev_forks.engines, struct tmo, fork_link) {
		if (tmo__thread_engine == e) {
			e->fork_safe = true;
			continue;
		}
		pthread_mutex_lock(&e->park.mu);
		while (atomic_load(&e->fork_req) && !e->fork_held &&
		       pthread_cond_timedwait(&e->park.cv, &e->park.mu, &ts) == 0)
			;
		e->fork_safe = e->fork_held;
		pthread_mutex_unlock(&e->park.mu);
	}
	/* 2. Take every engine mutex, then wait for the calls made without it
	 * to leave libevent. */
	tmo_list_for_each(e, &tmo__lev_forks.engines, struct tmo, fork_link) {
		e->fork_locked = pthread_mutex_timedlock(&e->m, &rts) == 0;
		if (!e->fork_locked) {
			e->fork_safe = false;
			continue;
		}
		pthread_mutex_lock(&e->gm);
		atomic_store(&e->fork_waiting, 1);
		while (atomic_load(&e->outside) != 0 &&
		       pthread_cond_timedwait(&e->gcv, &e->gm, &ts) == 0)
			;
		if (atomic_load(&e->outside) != 0)
			e->fork_safe = false;
		atomic_store(&e->fork_waiting, 0);
		pthread_mutex_unlock(&e->gm);
	}
}

/* Parent and child alike (in the child, only the forking thread's locks and
 * flags matter: the engine threads are not there). */
static void fork_release(void)
{
	tmo_list_for_each(e, &tmo__lev_forks.engines, struct tmo, fork_link) {
		if (e->fork_locked)
			pthread_mutex_unlock(&e->m);
		pthread_mutex_lock(&e->park.mu);
		atomic_store(&e->fork_req, 0);
		pthread_cond_broadcast(&e->park.cv);
		pthread_mutex_unlock(&e->park.mu);
	}
	pthread_mutex_unlock(&tmo__lev_forks.mu);
}

/* In a child after fork(): see the header comment.  Never waits: the
 * engine thread, and whatever it held, is not here.  The mutexes and
 * condition variables are left alone (glibc's pthread_cond_destroy waits
 * for waiters the parent's threads were), and so are the callers' timers
 * (the child can never resolve them, so it may have freed them). */
void tmo__lev_destroy_forked(struct tmo *e)
{
	tmo__fork_set_leave(&tmo__lev_forks, &e->fork_link);
	/* The record list is whole unless a thread held m at the fork (never,
	 * once quiesced). */
	bool list_ok = pthread_mutex_trylock(&e->m) == 0;
	if (e->fork_safe && list_ok && event_reinit(e->eb) == 0) {
		/* Our events are deleted first, without waiting: libevent may take
		 * one of them (the control event, or a freed record's address
		 * reused) for the callback the engine thread was running at the
		 * fork, and event_base_free() would wait for it forever.  After
		 * event_reinit(), so that the wake-up these deletes send goes to
		 * the child's own notify descriptor. */
		event_del_noblock(e->ctl);
		tmo_list_for_each(r, &e->recs, struct lev_rec, link)
			event_del_noblock(rec_ev(e, r));
		event_base_free(e->eb);
	}
	/* Otherwise the base is left, untouched: it still points at the
	 * records and the control event, and nothing uses it again. */
	if (list_ok) {
		tmo_list_for_each_safe(r, &e->recs, struct lev_rec, link)
			tmo__free(r);
		pthread_mutex_unlock(&e->m);
	}
	tmo__free(e->ctl);
	tmo__free(e);
}
