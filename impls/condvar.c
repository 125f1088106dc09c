/*
 * condvar: one timer thread, one mutex, a condition variable on
 * CLOCK_MONOTONIC and a 4-ary min-heap whose nodes live in the caller's
 * timers.
 *
 * Design
 * ------
 * Arm reads the clock, pushes the timer's own heap node and signals the
 * timer thread only when the new deadline is earlier than the time the
 * thread sleeps until (`wake_at`): only then can the thread's sleep be too
 * long.  That is stricter than "became the earliest": after a cancel of the
 * earliest timer the thread still sleeps until that old deadline, and a
 * re-arm at a later time needs no wake-up at all; the cost is one spare
 * wake at the old deadline, where the thread re-reads the heap and sleeps
 * again.  So a steady arm/cancel loop makes no system call.  Cancel removes
 * the node at once (O(log n), no lazy deletion), so a cancelled timer holds
 * nothing, and never signals.  Neither allocates, apart from the heap
 * array's amortised doubling.
 *
 * The timer thread sleeps until the earliest deadline, reads the clock once
 * (`now`) and then takes the timers due at that `now` off the heap one by one
 * in (deadline, arm order); each callback runs with the mutex released.
 * Popping one due timer per callback, rather than moving the whole due batch
 * to a side list first, keeps a due-but-not-yet-run timer cancellable by the
 * same O(log n) remove (and needs no second set of links in the timer); the
 * batch is still fixed by the one clock read, so a callback that re-arms
 * with timeout 0 runs again on the next round, not in an endless loop.
 * The heap is never mid-update while a callback runs.
 *
 * Exactly once: a timer's state (in its private words) changes only under
 * the mutex: IDLE -> PENDING (arm), PENDING -> IDLE (cancel: PREVENTED),
 * PENDING -> FIRED (timer thread, just before the callback).  The engine
 * records which timer's callback is running (`running`); after the callback
 * returns the timer thread never touches the timer again (the callback may
 * have freed it), it only compares the pointer.
 *
 * A cancel that finds the timer's callback running waits for it through the
 * callback gate (src/core/gate.h), under the engine mutex, which refuses a
 * wait that would deadlock across engines (TMO_EDEADLK) before anything
 * changed.
 *
 * Park (src/core/park.h): the hook sits at the top of the loop and between
 * callbacks, where the thread holds the engine mutex, so arm and cancel
 * block meanwhile: no TMO_CAP_LOCKFREE_ARM.
 *
 * Destroy sets `stop` and empties the heap under the mutex, so nothing that
 * has not started runs (the timer thread checks `stop` before each pop),
 * then joins the thread, which waits for a running callback; what that
 * callback armed meanwhile is cancelled after the join.
 *
 * fork(): the child has no timer thread; the core refuses every call there
 * (TMO_EFORKED).  A pthread_atfork prepare handler takes every condvar
 * engine's mutex (so no heap is mid-update at the fork) and both handlers
 * give it back; a parked engine, whose thread holds the mutex, is left (at
 * most FORK_LOCK_NS is spent waiting for the mutexes).  destroy_forked
 * frees the engine and, when the mutex was free at the fork, its heap
 * array; it leaves the mutex and condition variables alone: glibc's
 * pthread_cond_destroy() waits for the waiters it counts, and the parent's
 * timer thread may be one of them.  A callback that forks returns, in the child, into a
 * copy of the timer thread that is the child's only thread: that thread ends
 * there (the child exits 0) instead of running the parent's timers again.
 *
 * Resolution: the wake-up latency of a sleeping thread (~20-60 us on an idle
 * machine, more under load); deadlines are exact, nothing is rounded.
 */
#include <errno.h>
#include <stdbool.h>

#include "core/forkset.h"
#include "core/gate.h"
#include "core/internal.h"
#include "core/park.h"
#include "ds/heap.h"

/* How long the fork handler waits, in all, for the engines' mutexes. */
#define FORK_LOCK_NS TMO_NSEC_PER_SEC

enum cv_state {
	CV_IDLE = 0, /* all-zero timer: never armed, or its arm was prevented */
	CV_PENDING,  /* in the heap */
	CV_FIRED,    /* taken off the heap for its callback (running or done) */
};

/* What the engine keeps in the caller's timer. */
struct cv_priv {
	struct tmo_heap_node node; /* first: node <-> priv is a cast */
	uint32_t state;            /* enum cv_state, under the engine's mutex */
};
TMO__PRIV_FITS(struct cv_priv);

struct tmo {
	struct tmo_base base;
	pthread_mutex_t m;
	pthread_cond_t cv;       /* timer thread sleeps here (monotonic) */
	struct tmo_heap heap;
	pthread_t thread;
	bool stop;
	/* When the timer thread will next look at the heap: the deadline of its
	 * timed sleep, INT64_MAX for an untimed one, INT64_MIN while it is
	 * awake or already signalled (it re-reads the heap before sleeping). */
	int64_t wake_at;
	struct tmo__gate gate; /* under m */
	uint64_t fired, cancelled;
	struct tmo__park park;

	/* In the fork set, and whether the prepare handler holds m. */
	struct tmo_list fork_link;
	bool fork_locked;
};

static inline struct cv_priv *priv(struct tmo_timer *t) { return TMO__PRIV(struct cv_priv, t); }

static inline struct tmo_timer *timer_of(struct tmo_heap_node *n)
{
	return tmo_container_of((uint64_t *)(void *)n, struct tmo_timer, tmo_private);
}

static void *timer_thread(void *arg)
{
	struct tmo *e = arg;
	tmo__thread_enter(e, "condvar");
	pthread_mutex_lock(&e->m);
	for (;;) {
		tmo__park_point(&e->park); /* holding m */
		if (e->stop)
			break;
		struct tmo_heap_node *top = tmo__heap_peek(&e->heap);
		if (top == NULL) {
			e->wake_at = INT64_MAX;
			pthread_cond_wait(&e->cv, &e->m);
			e->wake_at = INT64_MIN;
			continue;
		}
		int64_t now = tmo_now_ns();
		if (top->deadline > now) {
			struct timespec ts = tmo__ts_from_ns(top->deadline);
			e->wake_at = top->deadline;
			pthread_cond_timedwait(&e->cv, &e->m, &ts);
			e->wake_at = INT64_MIN;
			continue; /* re-read the heap: an arm or cancel may have changed it */
		}
		/* Run what is due at `now`, earliest first. */
		while (!e->stop && (top = tmo__heap_peek(&e->heap)) != NULL && top->deadline <= now) {
			tmo__heap_pop(&e->heap);
			struct tmo_timer *t = timer_of(top);
			priv(t)->state = CV_FIRED;
			tmo__gate_begin(&e->gate, t);
			e->fired++;
			tmo_callback *cb = t->cb;
			void *cb_arg = t->arg;
			pthread_mutex_unlock(&e->m);
			cb(t, cb_arg);
			tmo__end_if_forked(e);
			pthread_mutex_lock(&e->m);
			tmo__gate_end(&e->gate, &e->m);
			tmo__park_point(&e->park);
		}
	}
	pthread_mutex_unlock(&e->m);
	return NULL;
}

/* ---- fork ------------------------------------------------------------------- */

TMO__FORK_SET(static, forks, fork_prepare, fork_release, fork_release);

static void fork_prepare(void)
{
	pthread_mutex_lock(&forks.mu);
	/* pthread_mutex_timedlock (CLOCK_REALTIME): ThreadSanitizer does not
	 * know pthread_mutex_clocklock.  A clock step only moves the bound. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += FORK_LOCK_NS / TMO_NSEC_PER_SEC;
	tmo_list_for_each(e, &forks.engines, struct tmo, fork_link) {
		pthread_mutex_lock(&e->park.mu);
		bool parked = e->park.parked; /* its thread holds m until park(0) */
		pthread_mutex_unlock(&e->park.mu);
		e->fork_locked = !parked && pthread_mutex_timedlock(&e->m, &ts) == 0;
	}
}

/* Parent and child alike. */
static void fork_release(void)
{
	tmo_list_for_each(e, &forks.engines, struct tmo, fork_link)
		if (e->fork_locked)
			pthread_mutex_unlock(&e->m);
	pthread_mutex_unlock(&forks.mu);
}

/* ---- create / destroy ----------------------------------------------------- */

static void destroy_sync(struct tmo *e)
{
	tmo__park_fini(&e->park);
	tmo__gate_fini(&e->gate);
	pthread_cond_destroy(&e->cv);
	pthread_mutex_destroy(&e->m);
}

static int cv_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity of its own: deadlines are exact */
	struct tmo *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	int rc = tmo__heap_init(&e->heap, TMO_HEAP_DEFAULT_ARITY, 64);
	if (rc != 0) {
		tmo__free(e);
		return rc;
	}
	if (pthread_mutex_init(&e->m, NULL) != 0 || tmo__cond_init_monotonic(&e->cv) != 0 ||
	    tmo__gate_init(&e->gate) != 0 || tmo__park_init(&e->park) != 0) {
		/* glibc's init of these cannot fail; no partial cleanup needed
		 * beyond memory (destroying never-initialised objects is UB). */
		tmo__heap_fini(&e->heap);
		tmo__free(e);
		return TMO_ESYS;
	}
	e->wake_at = INT64_MIN;
	rc = tmo__thread_create(&e->thread, NULL, timer_thread, e);
	if (rc != 0) {
		destroy_sync(e);
		tmo__heap_fini(&e->heap);
		tmo__free(e);
		return rc;
	}
	tmo__fork_set_join(&forks, &e->fork_link);
	*out = e;
	return 0;
}

/* Mark every timer still in the heap idle: its arm is cancelled. */
static void drain_heap(struct tmo *e)
{
	struct tmo_heap_node *n;
	while ((n = tmo__heap_pop(&e->heap)) != NULL) {
		struct cv_priv *p = (struct cv_priv *)(void *)n;
		p->state = CV_IDLE;
		e->cancelled++;
	}
}

static void cv_destroy(struct tmo *e)
{
	tmo__fork_set_leave(&forks, &e->fork_link);
	tmo__park_release(&e->park);

	pthread_mutex_lock(&e->m);
	e->stop = true;
	drain_heap(e);
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->m);
	pthread_join(e->thread, NULL);
	/* A callback that was running may have re-armed: cancel that too. */
	drain_heap(e);
	tmo__heap_fini(&e->heap);
	destroy_sync(e);
	tmo__free(e);
}

/* In a child after fork(): see the header comment.  The heap array is freed
 * only if the mutex was free at the fork (a heap mid-update may hold an
 * array pointer already freed; the prepare handler held it, unless the
 * engine was parked); the timers still in the heap are not touched: the
 * child can never resolve them, so it may have freed them. */
static void cv_destroy_forked(struct tmo *e)
{
	tmo__fork_set_leave(&forks, &e->fork_link);
	if (pthread_mutex_trylock(&e->m) == 0) {
		e->heap.n = 0;
		tmo__heap_fini(&e->heap);
		pthread_mutex_unlock(&e->m);
	}
	tmo__free(e);
}

static int cv_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                  void *arg)
{
	struct cv_priv *p = priv(t);
	/* The clock read is the design's: the deadline is absolute. */
	int64_t deadline = tmo_now_ns() + timeout_ns;
	pthread_mutex_lock(&e->m);
	if (p->state == CV_PENDING) {
		pthread_mutex_unlock(&e->m);
		return TMO_EARMED;
	}
	int rc = tmo__heap_push(&e->heap, &p->node, deadline);
	if (rc != 0) {
		pthread_mutex_unlock(&e->m);
		return rc; /* the timer is unchanged */
	}
	t->cb = cb;
	t->arg = arg;
	p->state = CV_PENDING;
	/* Only a deadline before the thread's wake-up time needs a signal;
	 * once signalled, the thread re-reads the heap before it sleeps again,
	 * so later arms need none either. */
	bool wake = deadline < e->wake_at;
	if (wake)
		e->wake_at = INT64_MIN;
	pthread_mutex_unlock(&e->m);
	/* After the unlock, so the woken thread does not block on the mutex;
	 * it reads the heap under the mutex, so the push cannot be missed. */
	if (wake)
		pthread_cond_signal(&e->cv);
	return 0;
}

static int cv_cancel(struct tmo *e, struct tmo_timer *t)
{
	struct cv_priv *p = priv(t);
	pthread_mutex_lock(&e->m);
	int waited = tmo__gate_wait(&e->gate, &e->m, e, t);
	int res;
	if (waited < 0) {
		res = waited; /* TMO_EDEADLK: nothing changed, the callback still runs */
	} else if (p->state == CV_PENDING) {
		/* The first arm, or the re-arm of the callback we waited for. */
		tmo__heap_remove(&e->heap, &p->node);
		p->state = CV_IDLE;
		e->cancelled++;
		res = TMO_CANCEL_PREVENTED;
	} else {
		res = tmo__gate_result(&e->gate, t, p->state == CV_FIRED, waited);
	}
	pthread_mutex_unlock(&e->m);
	return res;
}

static int cv_stats(struct tmo *e, struct tmo_stats *out)
{
	pthread_mutex_lock(&e->m);
	out->pending = tmo__heap_size(&e->heap);
	out->held_nodes = out->pending; /* nodes live in the callers' timers */
	out->held_bytes = tmo__heap_bytes(&e->heap);
	out->threads = 1;
	out->fired = e->fired;
	out->cancelled = e->cancelled;
	pthread_mutex_unlock(&e->m);
	return 0;
}

/* Park's wake-up, under m (park.h: m is this engine's wake_lock, since the
 * parked thread holds it): it reaches the thread in its sleep or finds it
 * before its next look at the request. */
static void cv_wake(struct tmo *e) { pthread_cond_signal(&e->cv); }

static int cv_park(struct tmo *e, int on)
{
	return tmo__park_set(&e->park, on, NULL, &e->m, cv_wake, e);
}

static const struct tmo_testing_ops testing_ops = {.park = cv_park};

const struct tmo_engine_ops tmo__engine_condvar = {
	.name = "condvar",
	.summary = "one timer thread, mutex + CLOCK_MONOTONIC condvar, 4-ary heap of "
	           "intrusive nodes; resolution = thread wake-up latency (~50 us idle)",
	.caps = TMO_CAP_NO_ALLOC | TMO_CAP_PARK,
	.resolution_ns = 50 * TMO_NSEC_PER_USEC,
	TMO__ENGINE_OPS(cv),
	.testing = &testing_ops,
};
