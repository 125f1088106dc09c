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
 * Cancel from another thread while the callback runs waits on done_cv; the
 * engine thread then waits (drain_cv) until every such waiter re-took the
 * mutex, so the waiter cancels a re-arm made by the callback before it can
 * fire again.  Cancel from inside the callback returns TMO_CANCEL_SELF.
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
 * event_del, which is counted in `outside` and waited for), and records whether all that happened within FORK_QUIESCE_NS (a
 * callback that runs longer, or a parked engine, is not quiesced).  The
 * parent and child handlers release them.  So fork() waits, per libevent engine, for
 * a wake-up of its thread or the end of its running callback, at most
 * FORK_QUIESCE_NS.  In a child forked from a
 * quiesced engine, destroy_forked calls event_reinit() (a new epoll set and
 * new notify descriptors for the child; the inherited ones are only closed,
 * never removed from the parent's set) and then event_base_free(), and
 * frees the records.  From an engine that was not quiesced it frees only
 * what the engine allocated itself and leaves libevent's base and its
 * descriptors in the child, untouched.  The count costs a cancel that
 * prevents its timer two atomic read-modify-writes.  A callback that
 * forks returns, in the child, into a copy of the engine thread that is the
 * child's only thread: it ends there (the child exits 0) instead of running
 * the inherited loop on descriptors the parent shares.
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

#include "core/internal.h"

/* How long the fork handler waits for an engine to quiesce. */
#define FORK_QUIESCE_NS TMO_NSEC_PER_SEC

enum rec_state { REC_PENDING = 1, REC_FIRING, REC_CANCELLED };

struct lev_rec {
	struct lev_rec *prev, *next; /* pending list, under m (destroy frees it) */
	struct tmo *eng;
	struct tmo_timer *timer;
	tmo_callback *cb;
	void *arg;
	int state; /* enum rec_state, under m */
	/* then, at eng->ev_off: the struct event */
};

/* What the engine keeps in the caller's timer (which engine owns it is the
 * core's tmo_timer.owner).  Written under the engine mutex; atomic because
 * arm reads `rec` without it. */
struct lev_priv {
	_Atomic(struct lev_rec *) rec; /* the pending record, NULL otherwise */
	atomic_uint fired;             /* the last arm's callback started */
};
TMO__PRIV_FITS(struct lev_priv);

extern const struct tmo_engine_ops tmo_engine_libevent;

struct tmo {
	struct tmo_base base;
	struct event_base *eb;
	pthread_t thread;
	struct event *ctl; /* internal: stop, park and fork requests */
	size_t ev_off, rec_size;

	pthread_mutex_t m;
	pthread_cond_t done_cv;  /* a running callback returned */
	pthread_cond_t drain_cv; /* the last done_cv waiter re-took m */
	struct lev_rec *head;    /* pending records */
	struct tmo_timer *running;
	uint64_t run_gen;
	uint32_t waiters;
	uint64_t pending, records, peak, fired, cancelled;

	atomic_int stop; /* set under m: lev_fire starts no callback after it */
	atomic_int park_req;
	pthread_mutex_t pm;
	pthread_cond_t pcv; /* monotonic: the fork handler waits on it too */
	bool parked;

	/* fork (see the header comment).  fork_req is set under pm; the engine
	 * thread holds at its fork point while it is set (fork_held). */
	struct tmo *fork_prev, *fork_next; /* live engines, under fork_mu */
	atomic_int fork_req;
	bool fork_held;
	/* Cancels inside event_del (called without `m`), and whether a fork
	 * handler waits for them to leave (under gm). */
	atomic_int outside;
	atomic_int fork_waiting;
	pthread_mutex_t gm;
	pthread_cond_t gcv; /* monotonic */
	bool fork_locked; /* the prepare handler holds m */
	bool fork_safe;   /* quiesced at the last fork: the child may free the base */
};

static inline struct lev_priv *priv(struct tmo_timer *t) { return TMO__PRIV(struct lev_priv, t); }

static inline struct event *rec_ev(struct tmo *e, struct lev_rec *r)
{
	return (struct event *)(void *)((char *)r + e->ev_off);
}

static void link_rec(struct tmo *e, struct lev_rec *r)
{
	r->prev = NULL;
	r->next = e->head;
	if (e->head != NULL)
		e->head->prev = r;
	e->head = r;
}

static void unlink_rec(struct tmo *e, struct lev_rec *r)
{
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		e->head = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
}

/* ---- calls into libevent without the engine mutex ------------------------ */

/* Entered with m held (so the fork handler, which takes m, sees the count),
 * left without it.  Dekker pair with fork_prepare: leaving decrements then
 * reads fork_waiting; the handler sets fork_waiting then reads the count
 * (seq_cst), so one of them sees the other. */
static void outside_enter(struct tmo *e) { atomic_fetch_add(&e->outside, 1); }

static void outside_leave(struct tmo *e)
{
	if (atomic_fetch_sub(&e->outside, 1) == 1 && atomic_load(&e->fork_waiting)) {
		pthread_mutex_lock(&e->gm);
		pthread_cond_broadcast(&e->gcv);
		pthread_mutex_unlock(&e->gm);
	}
}

/* ---- the engine thread ---------------------------------------------------- */

/* Where the engine thread holds while a fork is prepared: called where it
 * holds no libevent lock and not `m` (end of lev_fire, the control event's
 * callback). */
static void fork_point(struct tmo *e)
{
	if (!atomic_load_explicit(&e->fork_req, memory_order_acquire))
		return;
	pthread_mutex_lock(&e->pm);
	if (atomic_load(&e->fork_req)) {
		e->fork_held = true;
		pthread_cond_broadcast(&e->pcv);
		while (atomic_load(&e->fork_req))
			pthread_cond_wait(&e->pcv, &e->pm);
		e->fork_held = false;
	}
	pthread_mutex_unlock(&e->pm);
}

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
	unlink_rec(e, r);
	e->pending--;
	e->fired++;
	struct tmo_timer *t = r->timer;
	tmo_callback *cb = r->cb;
	void *cb_arg = r->arg;
	struct lev_priv *p = priv(t);
	atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
	atomic_store_explicit(&p->fired, 1, memory_order_relaxed);
	e->running = t;
	pthread_mutex_unlock(&e->m);

	cb(t, cb_arg); /* may free t: not touched again */
	tmo__end_if_forked(e);

	pthread_mutex_lock(&e->m);
	e->running = NULL;
	e->run_gen++;
	e->records--;
	if (e->waiters > 0) {
		pthread_cond_broadcast(&e->done_cv);
		while (e->waiters > 0)
			pthread_cond_wait(&e->drain_cv, &e->m);
	}
	pthread_mutex_unlock(&e->m);
	tmo__free(r);
	fork_point(e);
}

/* Called by event_base_foreach_event with the base lock held. */
static int park_hold(const struct event_base *b, const struct event *ev, void *arg)
{
	(void)b;
	(void)ev;
	struct tmo *e = arg;
	pthread_mutex_lock(&e->pm);
	e->parked = true;
	pthread_cond_broadcast(&e->pcv);
	while (atomic_load(&e->park_req))
		pthread_cond_wait(&e->pcv, &e->pm);
	e->parked = false;
	pthread_mutex_unlock(&e->pm);
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
	if (atomic_load(&e->park_req) && event_base_foreach_event(e->eb, park_hold, e) == 0)
		park_hold(NULL, NULL, e); /* visited nothing: park without the lock */
	fork_point(e);
}

static void *lev_main(void *arg)
{
	struct tmo *e = arg;
	tmo__thread_engine = e;
	/* Only the ctl callback breaks the loop (stop set); an error return
	 * (the backend failed) ends the thread too. */
	while (!atomic_load(&e->stop))
		if (event_base_loop(e->eb, EVLOOP_NO_EXIT_ON_EMPTY) < 0)
			break;
	return NULL;
}

/* ---- fork ------------------------------------------------------------------- */

/* Live engines.  Held across the fork (prepare to parent/child), and around
 * event_base_new/free, which take libevent's global signal lock. */
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tmo *fork_list;

static void fork_prepare(void)
{
	pthread_mutex_lock(&fork_mu);
	int64_t end = tmo_now_ns() + FORK_QUIESCE_NS;
	struct timespec ts = tmo__ts_from_ns(end);
	/* pthread_mutex_timedlock takes CLOCK_REALTIME (ThreadSanitizer does
	 * not know pthread_mutex_clocklock); a clock step only moves the bound. */
	struct timespec rts;
	clock_gettime(CLOCK_REALTIME, &rts);
	rts.tv_sec += FORK_QUIESCE_NS / TMO_NSEC_PER_SEC;
	/* 1. Ask every engine thread to hold (all first, then wait for each). */
	for (struct tmo *e = fork_list; e != NULL; e = e->fork_next) {
		e->fork_safe = false;
		if (tmo__thread_engine == e)
			continue; /* forking from its own callback: it holds nothing */
		pthread_mutex_lock(&e->pm);
		/* A parked thread holds the base lock (event_active would wait
		 * for it): not quiesced. */
		bool parked = e->parked || atomic_load(&e->park_req);
		if (!parked)
			atomic_store(&e->fork_req, 1);
		pthread_mutex_unlock(&e->pm);
		if (!parked)
			event_active(e->ctl, EV_TIMEOUT, 1);
	}
	for (struct tmo *e = fork_list; e != NULL; e = e->fork_next) {
		if (tmo__thread_engine == e) {
			e->fork_safe = true;
			continue;
		}
		pthread_mutex_lock(&e->pm);
		while (atomic_load(&e->fork_req) && !e->fork_held &&
		       pthread_cond_timedwait(&e->pcv, &e->pm, &ts) == 0)
			;
		e->fork_safe = e->fork_held;
		pthread_mutex_unlock(&e->pm);
	}
	/* 2. Take every engine mutex, then wait for the calls made without it
	 * to leave libevent. */
	for (struct tmo *e = fork_list; e != NULL; e = e->fork_next) {
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
	for (struct tmo *e = fork_list; e != NULL; e = e->fork_next) {
		if (e->fork_locked)
			pthread_mutex_unlock(&e->m);
		pthread_mutex_lock(&e->pm);
		atomic_store(&e->fork_req, 0);
		pthread_cond_broadcast(&e->pcv);
		pthread_mutex_unlock(&e->pm);
	}
	pthread_mutex_unlock(&fork_mu);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_init(void) { pthread_atfork(fork_prepare, fork_release, fork_release); }

/* Under fork_mu. */
static void fork_list_add(struct tmo *e)
{
	e->fork_prev = NULL;
	e->fork_next = fork_list;
	if (fork_list != NULL)
		fork_list->fork_prev = e;
	fork_list = e;
}

static void fork_list_remove(struct tmo *e)
{
	if (e->fork_prev != NULL)
		e->fork_prev->fork_next = e->fork_next;
	else
		fork_list = e->fork_next;
	if (e->fork_next != NULL)
		e->fork_next->fork_prev = e->fork_prev;
}

/* ---- create / destroy ----------------------------------------------------- */

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_rc;
static void evthread_init(void) { evthread_rc = evthread_use_pthreads(); }

static void destroy_sync(struct tmo *e)
{
	pthread_cond_destroy(&e->gcv);
	pthread_mutex_destroy(&e->gm);
	pthread_cond_destroy(&e->pcv);
	pthread_mutex_destroy(&e->pm);
	pthread_cond_destroy(&e->drain_cv);
	pthread_cond_destroy(&e->done_cv);
	pthread_mutex_destroy(&e->m);
}

static int lev_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity of its own */
	pthread_once(&evthread_once, evthread_init);
	if (evthread_rc != 0)
		return TMO_ESYS;
	pthread_once(&fork_once, fork_init);
	struct tmo *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	e->base.ops = &tmo_engine_libevent;
	size_t a = alignof(max_align_t);
	e->ev_off = (sizeof(struct lev_rec) + a - 1) / a * a;
	e->rec_size = e->ev_off + event_get_struct_event_size();
	e->ctl = tmo__malloc(event_get_struct_event_size());
	if (e->ctl == NULL) {
		tmo__free(e);
		return TMO_ENOMEM;
	}
	if (pthread_mutex_init(&e->m, NULL) != 0 || pthread_cond_init(&e->done_cv, NULL) != 0 ||
	    pthread_cond_init(&e->drain_cv, NULL) != 0 || pthread_mutex_init(&e->pm, NULL) != 0 ||
	    tmo__cond_init_monotonic(&e->pcv) != 0 || pthread_mutex_init(&e->gm, NULL) != 0 ||
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
		pthread_mutex_lock(&fork_mu);
		e->eb = event_base_new_with_config(ec);
		pthread_mutex_unlock(&fork_mu);
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
	pthread_mutex_lock(&fork_mu);
	fork_list_add(e);
	pthread_mutex_unlock(&fork_mu);
	*out = e;
	return 0;

fail_thread:
	event_del(e->ctl);
fail_ctl:
	pthread_mutex_lock(&fork_mu);
	event_base_free(e->eb);
	pthread_mutex_unlock(&fork_mu);
fail_base:
	destroy_sync(e);
	tmo__free(e->ctl);
	tmo__free(e);
	return rc;
}

static void lev_destroy(struct tmo *e)
{
	pthread_mutex_lock(&fork_mu);
	fork_list_remove(e);
	pthread_mutex_unlock(&fork_mu);

	pthread_mutex_lock(&e->pm);
	atomic_store(&e->park_req, 0);
	pthread_cond_broadcast(&e->pcv);
	pthread_mutex_unlock(&e->pm);

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
	struct lev_rec *r = e->head;
	while (r != NULL) {
		struct lev_rec *next = r->next;
		event_del(rec_ev(e, r));
		struct lev_priv *p = priv(r->timer);
		atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
		atomic_store_explicit(&p->fired, 0, memory_order_relaxed);
		e->cancelled++;
		tmo__free(r);
		r = next;
	}
	event_del(e->ctl);
	pthread_mutex_lock(&fork_mu);
	event_base_free(e->eb);
	pthread_mutex_unlock(&fork_mu);
	destroy_sync(e);
	tmo__free(e->ctl);
	tmo__free(e);
}

/* In a child after fork(): see the header comment.  Never waits: the
 * engine thread, and whatever it held, is not here.  The mutexes and
 * condition variables are left alone (glibc's pthread_cond_destroy waits
 * for waiters the parent's threads were), and so are the callers' timers
 * (the child can never resolve them, so it may have freed them). */
static void lev_destroy_forked(struct tmo *e)
{
	pthread_mutex_lock(&fork_mu);
	fork_list_remove(e);
	pthread_mutex_unlock(&fork_mu);
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
		for (struct lev_rec *r = e->head; r != NULL; r = r->next)
			event_del_noblock(rec_ev(e, r));
		event_base_free(e->eb);
	}
	/* Otherwise the base is left, untouched: it still points at the
	 * records and the control event, and nothing uses it again. */
	if (list_ok) {
		for (struct lev_rec *r = e->head, *next; r != NULL; r = next) {
			next = r->next;
			tmo__free(r);
		}
		pthread_mutex_unlock(&e->m);
	}
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
	link_rec(e, r);
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
		unlink_rec(e, r);
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
	bool waited = false;
	pthread_mutex_lock(&e->m);
	if (e->running == t && tmo__thread_engine != e) {
		/* Wait for this invocation of the callback to return; the engine
		 * thread then holds off until every waiter has looked. */
		uint64_t gen = e->run_gen;
		e->waiters++;
		while (e->run_gen == gen)
			pthread_cond_wait(&e->done_cv, &e->m);
		if (--e->waiters == 0)
			pthread_cond_signal(&e->drain_cv);
		waited = true;
	}
	struct lev_rec *r = atomic_load_explicit(&p->rec, memory_order_relaxed);
	if (r != NULL) {
		/* The first arm, or the re-arm by the callback we waited for. */
		r->state = REC_CANCELLED;
		unlink_rec(e, r);
		e->pending--;
		e->cancelled++;
		atomic_store_explicit(&p->rec, NULL, memory_order_relaxed);
		outside_enter(e);
		pthread_mutex_unlock(&e->m);
		/* Never under m: it may wait for lev_fire, which takes m. */
		event_del(rec_ev(e, r));
		outside_leave(e);
		tmo__free(r);
		pthread_mutex_lock(&e->m);
		e->records--;
		pthread_mutex_unlock(&e->m);
		return TMO_CANCEL_PREVENTED;
	}
	int res;
	if (atomic_load_explicit(&p->fired, memory_order_relaxed))
		res = waited ? TMO_CANCEL_WAITED
		      : e->running == t ? TMO_CANCEL_SELF /* on the engine thread */
		                        : TMO_CANCEL_FIRED;
	else /* a concurrent cancel prevented it, or the callback we waited
	      * for re-armed and cancelled itself */
		res = waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;
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

static int lev_park(struct tmo *e, int on)
{
	if (!on) {
		pthread_mutex_lock(&e->pm);
		atomic_store(&e->park_req, 0);
		pthread_cond_broadcast(&e->pcv);
		pthread_mutex_unlock(&e->pm);
		return 0;
	}
	pthread_mutex_lock(&e->pm);
	/* Not while a fork is prepared: the fork handler decided, under pm,
	 * that this thread is not parked, and it may still call event_active,
	 * which a parked thread (holding the base lock) would block. */
	while (atomic_load(&e->fork_req))
		pthread_cond_wait(&e->pcv, &e->pm);
	bool already = atomic_load(&e->park_req) || e->parked;
	atomic_store(&e->park_req, 1);
	pthread_mutex_unlock(&e->pm);
	/* Already requested, or still parked (a park(0) it has not seen yet:
	 * under pm it now sees park_req set again and stays): the parked thread
	 * holds the base lock, which event_active needs. */
	if (!already) {
		pthread_mutex_lock(&e->m); /* as in arm: no fork finds it inside */
		event_active(e->ctl, EV_TIMEOUT, 1);
		pthread_mutex_unlock(&e->m);
	}
	pthread_mutex_lock(&e->pm);
	while (!e->parked)
		pthread_cond_wait(&e->pcv, &e->pm);
	pthread_mutex_unlock(&e->pm);
	return 0;
}

const struct tmo_engine_ops tmo_engine_libevent = {
	.name = "libevent",
	.summary = "libevent 2.1 event_base (pthreads locking, PRECISE_TIMER + NO_CACHE_TIME: "
	           "CLOCK_MONOTONIC read per event_add, timerfd) run by one engine thread; "
	           "arm = malloc'd record + evtimer_assign + event_add, cancel = event_del; "
	           "engine mutex decides cancel vs fire; park holds the base lock",
	.caps = TMO_CAP_PARK,
	.resolution_ns = 50 * TMO_NSEC_PER_USEC,
	.create = lev_create,
	.destroy = lev_destroy,
	.arm = lev_arm,
	.cancel = lev_cancel,
	.stats = lev_stats,
	.park = lev_park,
	.destroy_forked = lev_destroy_forked,
};
