/*
 * libevent: a peer adapter over libevent 2.1 — one event_base with locking
 * (evthread_use_pthreads), run by one engine thread in event_base_loop
 * (EVLOOP_NO_EXIT_ON_EMPTY); arm = evtimer_assign + event_add from any
 * thread, cancel = event_del.
 *
 * Design
 * ------
 * Records: a struct event does not fit in the timer's six private words, so
 * each arm allocates a record (tmo__malloc) holding the event, sized with
 * event_get_struct_event_size() (no dependence on event_struct.h's layout).
 * libevent's design needs it: the event must stay at one address while
 * pending, and the base keeps pointers to it.  The record is freed by
 * whoever resolves the arm: the engine thread after the callback returned,
 * or the cancel that prevented it (after event_del returned).
 *
 * Exactly once: the record's state and the timer's private words change only
 * under the engine mutex `m`: PENDING -> CANCELLED (cancel: PREVENTED) or
 * PENDING -> FIRING (engine thread, in libevent's callback, just before ours).
 * libevent runs callbacks WITHOUT its base lock and marks the running one
 * (base->current_event): when a cancel has marked a record CANCELLED but the
 * loop has already entered that record's callback, the callback sees
 * CANCELLED and returns, and the cancel's event_del (called after releasing
 * `m`, never under it) blocks until that callback returned (event_del's
 * default EVENT_DEL_AUTOBLOCK waits for a running callback of an event
 * without EV_FINALIZE) — only then is the record freed.  After our callback
 * starts the engine thread never touches the caller's timer (the callback may
 * free it); after cancel returns the engine holds no reference to it.
 * libevent does not touch a non-persistent event after its callback returned,
 * so the engine thread frees the record right after ours returned.
 *
 * Cancel that finds the callback running waits for it through the callback
 * gate (src/core/gate.h), under `m`; the gate refuses a wait that would
 * deadlock across engines (TMO_EDEADLK) before anything changed.
 *
 * Time: libevent keeps struct timeval (microseconds).  The base is created
 * with EVENT_BASE_FLAG_PRECISE_TIMER, because without it libevent 2.1 on
 * Linux reads CLOCK_MONOTONIC_COARSE (one tick, ~4 ms, behind the real
 * clock: timers would fire up to a tick early against CLOCK_MONOTONIC) and
 * sleeps in epoll_wait with millisecond rounding; with it, CLOCK_MONOTONIC
 * and a timerfd.  And with EVENT_BASE_FLAG_NO_CACHE_TIME, because the time
 * cached once per loop iteration stays set while the loop runs callbacks
 * (with the base lock released): an arm from another thread meanwhile is
 * dated at the start of that iteration and fires early by as long as the
 * callbacks have run (measured: a 30 ms arm made 20 ms into a 40 ms callback
 * fired 10-16 ms early without the flag; tests/unit/libevent.c).  So libevent
 * reads the clock on every event_add (under its base lock).  libevent truncates that reading to the
 * microsecond, so arm rounds the timeout up to the microsecond and adds one
 * more: never early.
 *
 * Costs: arm = malloc + the engine mutex + event_add (base lock, clock read,
 * heap insert; when the new timer is the earliest, a write to the base's
 * notification fd to wake the loop — libevent coalesces these while one is
 * pending); cancel = the engine mutex + event_del (base lock) + free.
 *
 * Park: the engine thread stops inside the callback of an internal event,
 * inside event_base_foreach_event(), which holds the base lock while it
 * calls us: that is the state the loop is in while it processes expired
 * timeouts.  (libevent releases the base lock while callbacks run, so a
 * plain callback would hold nothing.)  Arms and cancels block on the base
 * lock meanwhile: no TMO_CAP_LOCKFREE_ARM, and the progress scenario shows
 * it.
 *
 * stats.held_bytes: records, plus libevent's timeout min-heap array, which
 * never shrinks: modelled from libevent 2.1's growth rule (8 pointers, then
 * doubling) and the peak number of pending events.  libevent's own
 * allocations do not go through tmo's allocation hooks (fault injection
 * reaches our records, the engine and its thread; TMO_FAULT_SYSRES is
 * consulted before the event_base, which opens epoll, eventfd and timerfd
 * descriptors).
 *
 * Destroy sets `stop` under `m` (from then on lev_fire runs no callback:
 * libevent may already have activated a whole batch of due events, and it
 * runs the control event only after them), wakes the loop through the
 * control event, joins the engine thread (which waits for a running
 * callback), and then cancels every record still listed: what had not
 * started, and what a running callback armed meanwhile.
 *
 * fork(): impls/libevent/fork.c (the engine quiesces before a fork, so a
 * child can free its copy).
 *
 * Resolution: wake-up latency of the engine thread (~20-60 us idle, as a
 * condvar's); deadlines are microseconds.
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "libevent/libevent.h"

/* ---- the engine thread ---------------------------------------------------- */

/* libevent's callback for an arm (base lock not held). */
static void lev_fire(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct lev_rec *r = arg;
	struct tmo *e = r->eng;
	pthread_mutex_lock(&e->m);
	if (r->state == REC_CANCELLED) {
		/* The cancel frees r once its event_del returns, which is after
		 * we return: do not touch r again. */
		pthread_mutex_unlock(&e->m);
		return;
	}
	if (atomic_load(&e->stop)) {
		/* Destroy has begun: r has not started, destroy cancels it. */
		pthread_mutex_unlock(&e->m);
		return;
	}
	r->state = REC_FIRING;
	tmo_list_del(&r->link);
	e->pending--;
	e->fired++;
	struct tmo_timer *t = r->timer;
	tmo_callback *cb = r->cb;
	void *cb_arg = r->arg;
	struct lev_priv *p = priv(t);
	atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
	atomic_store_explicit(&p->fired, 1, memory_order_relaxed);
	tmo__gate_begin(&e->gate, t);
	pthread_mutex_unlock(&e->m);

	cb(t, cb_arg); /* may free t: not touched again */
	tmo__end_if_forked(e);

	pthread_mutex_lock(&e->m);
	e->records--;
	tmo__gate_end(&e->gate, &e->m);
	pthread_mutex_unlock(&e->m);
	tmo__free(r);
	tmo__lev_fork_point(e);
}

/* Called by event_base_foreach_event with the base lock held. */
static int park_hold(const struct event_base *b, const struct event *ev, void *arg)
{
	(void)b;
	(void)ev;
	struct tmo *e = arg;
	tmo__park_point(&e->park);
	return 1; /* stop iterating */
}

/* The internal event: a persistent timer (so it is always in the base's
 * timeout heap, where foreach finds it) activated with event_active(). */
static void lev_ctl(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct tmo *e = arg;
	if (atomic_load(&e->stop)) {
		event_base_loopbreak(e->eb);
		return;
	}
	if (tmo__park_requested(&e->park) && event_base_foreach_event(e->eb, park_hold, e) == 0)
		park_hold(NULL, NULL, e); /* visited nothing: park without the lock */
	tmo__lev_fork_point(e);
}

static void *lev_main(void *arg)
{
	struct tmo *e = arg;
	tmo__thread_enter(e, "libevent");
	/* Only the ctl callback breaks the loop (stop set); an error return
	 * (the backend failed) ends the thread too. */
	while (!atomic_load(&e->stop))
		if (event_base_loop(e->eb, EVLOOP_NO_EXIT_ON_EMPTY) < 0)
			break;
	return NULL;
}

/* ---- create / destroy ----------------------------------------------------- */

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_rc;
static void evthread_init(void) { evthread_rc = evthread_use_pthreads(); }

static void destroy_sync(struct tmo *e)
{
	pthread_cond_destroy(&e->gcv);
	pthread_mutex_destroy(&e->gm);
	tmo__park_fini(&e->park);
	tmo__gate_fini(&e->gate);
	pthread_mutex_destroy(&e->m);
}

static int lev_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity of its own */
	pthread_once(&evthread_once, evthread_init);
	if (evthread_rc != 0)
		return TMO_ESYS;
	struct tmo *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	tmo_list_init(&e->recs);
	size_t a = alignof(max_align_t);
	e->ev_off = (sizeof(struct lev_rec) + a - 1) / a * a;
	e->rec_size = e->ev_off + event_get_struct_event_size();
	e->ctl = tmo__malloc(event_get_struct_event_size());
	if (e->ctl == NULL) {
		tmo__free(e);
		return TMO_ENOMEM;
	}
	if (pthread_mutex_init(&e->m, NULL) != 0 || tmo__gate_init(&e->gate) != 0 ||
	    tmo__park_init(&e->park) != 0 || pthread_mutex_init(&e->gm, NULL) != 0 ||
	    tmo__cond_init_monotonic(&e->gcv) != 0) {
		tmo__free(e->ctl);
		tmo__free(e);
		return TMO_ESYS; /* glibc's inits cannot fail */
	}

	int rc = TMO_EAGAIN;
	struct event_config *ec = NULL;
	if (!tmo__fault(TMO_FAULT_SYSRES) && (ec = event_config_new()) != NULL) {
		event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER |
		                              EVENT_BASE_FLAG_NO_CACHE_TIME);
		pthread_mutex_lock(&tmo__lev_forks.mu);
		e->eb = event_base_new_with_config(ec);
		pthread_mutex_unlock(&tmo__lev_forks.mu);
		event_config_free(ec);
	}
	if (e->eb == NULL)
		goto fail_base; /* descriptors or memory: TMO_EAGAIN */
	/* A year: the ctl event only ever runs through event_active(). */
	struct timeval year = {.tv_sec = 365 * 24 * 3600, .tv_usec = 0};
	rc = TMO_ESYS;
	if (event_assign(e->ctl, e->eb, -1, EV_PERSIST, lev_ctl, e) != 0 ||
	    event_add(e->ctl, &year) != 0)
		goto fail_ctl;
	rc = tmo__thread_create(&e->thread, NULL, lev_main, e);
	if (rc != 0)
		goto fail_thread;
	tmo__fork_set_join(&tmo__lev_forks, &e->fork_link);
	*out = e;
	return 0;

fail_thread:
	event_del(e->ctl);
fail_ctl:
	pthread_mutex_lock(&tmo__lev_forks.mu);
	event_base_free(e->eb);
	pthread_mutex_unlock(&tmo__lev_forks.mu);
fail_base:
	destroy_sync(e);
	tmo__free(e->ctl);
	tmo__free(e);
	return rc;
}

static void lev_destroy(struct tmo *e)
{
	tmo__fork_set_leave(&tmo__lev_forks, &e->fork_link);
	tmo__park_release(&e->park);

	pthread_mutex_lock(&e->m);
	atomic_store(&e->stop, 1);
	pthread_mutex_unlock(&e->m);
	/* event_base_loopbreak() from here could be lost: event_base_loop()
	 * clears the break flag when it starts.  An activated event is not: the
	 * loop runs it whenever it gets there, and it breaks from inside. */
	event_active(e->ctl, EV_TIMEOUT, 1);
	pthread_join(e->thread, NULL);

	/* The loop is gone: every record still listed never ran its callback
	 * (timed out or not).  Cancel them; their timers become idle. */
	tmo_list_for_each_safe(r, &e->recs, struct lev_rec, link) {
		event_del(rec_ev(e, r));
		struct lev_priv *p = priv(r->timer);
		atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
		atomic_store_explicit(&p->fired, 0, memory_order_relaxed);
		e->cancelled++;
		tmo__free(r);
	}
	event_del(e->ctl);
	pthread_mutex_lock(&tmo__lev_forks.mu);
	event_base_free(e->eb);
	pthread_mutex_unlock(&tmo__lev_forks.mu);
	destroy_sync(e);
	tmo__free(e->ctl);
	tmo__free(e);
}

/* ---- arm / cancel ----------------------------------------------------------- */

static int lev_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                   void *arg)
{
	struct lev_priv *p = priv(t);
	if (atomic_load_explicit(&p->rec, memory_order_relaxed) != NULL)
		return TMO_EARMED;
	struct lev_rec *r = tmo__malloc(e->rec_size);
	if (r == NULL)
		return TMO_ENOMEM;
	struct event *ev = rec_ev(e, r);
	if (evtimer_assign(ev, e->eb, lev_fire, r) != 0) {
		tmo__free(r);
		return TMO_ESYS;
	}
	r->eng = e;
	r->timer = t;
	r->cb = cb;
	r->arg = arg;
	r->state = REC_PENDING;
	t->cb = cb;
	t->arg = arg;
	/* libevent truncates its clock reading to the microsecond: round up,
	 * plus one, so the deadline is never before arm time + timeout. */
	int64_t us = (timeout_ns + 999) / 1000 + 1;
	struct timeval tv = {.tv_sec = (time_t)(us / 1000000), .tv_usec = (suseconds_t)(us % 1000000)};

	pthread_mutex_lock(&e->m);
	tmo_list_add(&e->recs, &r->link);
	e->pending++;
	e->records++;
	if (e->pending > e->peak)
		e->peak = e->pending;
	atomic_store_explicit(&p->rec, r, memory_order_relaxed);
	atomic_store_explicit(&p->fired, 0, memory_order_relaxed);
	/* Under m (so a fork never finds an arm inside libevent): m is taken
	 * before the base lock here and nowhere the other way round (the loop
	 * runs lev_fire without its lock). */
	if (event_add(ev, &tv) != 0) {
		tmo_list_del(&r->link);
		e->pending--;
		e->records--;
		atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
		pthread_mutex_unlock(&e->m);
		tmo__free(r);
		return TMO_ENOMEM; /* libevent could not grow its heap */
	}
	pthread_mutex_unlock(&e->m);
	return 0;
}

static int lev_cancel(struct tmo *e, struct tmo_timer *t)
{
	struct lev_priv *p = priv(t);
	/* Everything under m: the engine thread clears rec and sets fired in
	 * two stores, under m; read unlocked between them, a timer that is
	 * firing would look idle (TMO_ENOTARMED; the race scenario caught it). */
	pthread_mutex_lock(&e->m);
	int waited = tmo__gate_wait(&e->gate, &e->m, e, t);
	if (waited < 0) { /* TMO_EDEADLK: nothing changed, the callback still runs */
		pthread_mutex_unlock(&e->m);
		return waited;
	}
	struct lev_rec *r = atomic_load_explicit(&p->rec, memory_order_relaxed);
	if (r != NULL) {
		/* The first arm, or the re-arm by the callback we waited for. */
		r->state = REC_CANCELLED;
		tmo_list_del(&r->link);
		e->pending--;
		e->cancelled++;
		atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
		tmo__lev_outside_enter(e);
		pthread_mutex_unlock(&e->m);
		/* Never under m: it may wait for lev_fire, which takes m. */
		event_del(rec_ev(e, r));
		tmo__lev_outside_leave(e);
		tmo__free(r);
		pthread_mutex_lock(&e->m);
		e->records--;
		pthread_mutex_unlock(&e->m);
		return TMO_CANCEL_PREVENTED;
	}
	int res = tmo__gate_result(&e->gate, t,
	                           atomic_load_explicit(&p->fired, memory_order_relaxed), waited);
	pthread_mutex_unlock(&e->m);
	return res;
}

static int lev_stats(struct tmo *e, struct tmo_stats *out)
{
	pthread_mutex_lock(&e->m);
	/* libevent's timeout heap: 8 slots, doubling, never shrinking; it also
	 * holds the ctl event. */
	uint64_t cap = 8;
	while (cap < e->peak + 1)
		cap *= 2;
	out->pending = e->pending;
	out->held_nodes = e->records;
	out->held_bytes = e->records * e->rec_size + cap * sizeof(void *);
	out->threads = 1;
	out->fired = e->fired;
	out->cancelled = e->cancelled;
	pthread_mutex_unlock(&e->m);
	return 0;
}

/* Park's wake-up (not when already requested: the parked thread holds the
 * base lock, which event_active needs). */
static void lev_wake(struct tmo *e)
{
	pthread_mutex_lock(&e->m); /* as in arm: no fork finds it inside */
	event_active(e->ctl, EV_TIMEOUT, 1);
	pthread_mutex_unlock(&e->m);
}

/* Not while a fork is prepared (fork_req): the fork handler decided, under
 * park.mu, that this thread is not parked, and it may still call
 * event_active, which a parked thread (holding the base lock) would block. */
static int lev_park(struct tmo *e, int on)
{
	return tmo__park_set(&e->park, on, &e->fork_req, NULL, lev_wake, e);
}

static const struct tmo_testing_ops testing_ops = {.park = lev_park};

const struct tmo_engine_ops tmo__engine_libevent = {
	.name = "libevent",
	.summary = "libevent 2.1 event_base (pthreads locking, PRECISE_TIMER + NO_CACHE_TIME: "
	           "CLOCK_MONOTONIC read per event_add, timerfd) run by one engine thread; "
	           "arm = malloc'd record + evtimer_assign + event_add, cancel = event_del; "
	           "engine mutex decides cancel vs fire; park holds the base lock",
	.caps = TMO_CAP_PARK,
	.resolution_ns = 50 * TMO_NSEC_PER_USEC,
	/* TMO__ENGINE_OPS(lev) spelled out: destroy_forked is libevent/fork.c's */
	.create = lev_create, .destroy = lev_destroy, .arm = lev_arm, .cancel = lev_cancel,
	.stats = lev_stats, .destroy_forked = tmo__lev_destroy_forked,
	.testing = &testing_ops,
};
