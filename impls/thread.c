/*
 * thread: the baseline -- one OS thread per armed timer.
 *
 * Design
 * ------
 * Arm allocates a record (engine-owned; the design needs one per arm) with
 * its own condition variable on CLOCK_MONOTONIC and starts a thread that
 * sleeps on it until the deadline.  Cancel marks the record cancelled,
 * wakes the thread and joins it, then frees the record: when cancel returns
 * the thread is gone and nothing refers to the caller's timer.
 *
 * One engine mutex guards every record's state, the engine's record sets
 * and the private words of the timers armed here; each record has its own
 * condvar, so a wake-up reaches exactly one thread.  (A mutex per record as
 * well was considered: every transition must update the record and the
 * timer's words together, and arm/fire must update the engine's sets too,
 * so a per-record mutex would be taken with the engine one anyway.)
 *
 * Exactly once: a record goes WAITING -> CANCELLED (cancel or destroy) or
 * WAITING -> RUNNING -> DONE (its thread), only under the mutex; the timer's
 * own state (IDLE / PENDING / FIRED) changes in the same critical section.
 *
 * Order: independent threads would fire in whatever order the scheduler
 * wakes them, and on a loaded machine that inverted timers 2 ms apart.  So
 * the waiting records also sit in a heap by (deadline, arm order), and a
 * due thread fires only when no waiting record is due more than the
 * resolution before it (it is the heap's top, or within the resolution of
 * the top), and no such earlier timer has decided to fire without having
 * entered its callback yet (`entered`, set just before the call: a thread
 * preempted between its decision and its callback would otherwise be
 * overtaken).  Otherwise the earlier one is due but its thread has not run
 * yet: the blocked thread looks again every quarter resolution instead of
 * being woken by it, because that wake-up, sent between the earlier
 * thread's decision and its callback, let the woken thread preempt it and
 * run its callback first (unit/thread, two CPU spinners, 40 timers 1.25 ms
 * apart: without the heap 3-175 inversions in every run; heap + wake-up,
 * 7 in 1 run of 4; as now, 0 in 10).  Timers within the resolution of each
 * other still fire concurrently.  What remains unordered is a preemption
 * inside the call instruction itself.
 *
 * Threads and memory: a cancelled record's thread is joined by its
 * canceller.  A fired record stays on the `fired` list until its callback
 * has returned; then it is DONE and any later arm, cancel or destroy joins
 * its thread (already finished or about to) and frees it, so destroy
 * joins every thread the engine ever started.
 *
 * Cancel that finds the timer's callback running on another thread waits on
 * that record's condvar until the callback returned (a `waiters` count keeps
 * the record from being reaped meanwhile), then looks again: a re-arm made
 * by the callback is cancelled (PREVENTED).  Several invocations of one
 * timer's callback may run at once (a callback re-arms with a timeout
 * shorter than its own run): cancel waits for every one of them.  While a
 * cancel is in progress the timer's pending arm is held out of the heap and
 * does not fire even when due (`cancelling` in the timer's words), so a
 * chain of re-arming callbacks cannot keep the canceller waiting forever,
 * the arm that is pending when the waiting ends is the one cancel prevents,
 * and the held record does not delay any other timer.  The last cancel out
 * always finds the held arm (none can appear after its decision), so no
 * record stays held.  From inside one of the timer's own invocations cancel
 * never waits (two invocations cancelling each other would wait for each
 * other): it prevents a pending re-arm or returns SELF at once.
 *
 * Threads get TMO_CALLBACK_STACK_MIN of stack for the callback plus a
 * reserve (320 KiB of address space, a few pages of it touched; 1 MiB under
 * sanitizers); callbacks run on that stack.  A process-wide cap keeps
 * the engine from exhausting the system's thread ids.
 *
 * No single timer thread: park() returns TMO_EINVAL.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "heap.h"
#include "internal.h"


/* Threads all thread engines of the process may hold at once; arm beyond
 * it returns TMO_EAGAIN.  The kernel's own limit is system-wide (pid_max is
 * 32768 on this machine's kernel): running into it makes every process's
 * fork and pthread_create fail, not just ours.  Ten thousand pending timers
 * fit, and two test processes at the limit still leave room.  Sanitizer
 * runtimes need a larger stack and much more memory per thread (TSan
 * aborted at ~10k threads with "unable to unmap"): there, a thousand. */
#ifdef TMO__UNDER_SANITIZER
#define REC_STACK_SIZE (1024u * 1024u)
#define THREAD_ENGINE_MAX_THREADS 1000
#else
/* Callbacks get TMO_CALLBACK_STACK_MIN; the rest is the reserve that
 * tmo__thread_create adds for TLS, the thread descriptor and our frames
 * (the same floor, so it takes this attr as it is). */
#define REC_STACK_SIZE ((size_t)TMO_CALLBACK_STACK_MIN + 64u * 1024u)
#define THREAD_ENGINE_MAX_THREADS 10000
#endif
static atomic_int process_threads;

/* Deadlines are exact; this is the order granularity (see Order above) and
 * the declared resolution. */
#define THREAD_RESOLUTION_NS TMO_NSEC_PER_MSEC
/* How often a due thread blocked behind an earlier one looks again. */
#define BLOCKED_POLL_NS (THREAD_RESOLUTION_NS / 4)

enum rec_state {
	R_WAITING,   /* thread sleeps until the deadline (and its turn) */
	R_CANCELLED, /* its canceller (or destroy) joins the thread */
	R_RUNNING,   /* the callback runs on the record's thread */
	R_DONE,      /* callback returned; the thread is finished or finishing */
};

struct rec {
	struct tmo_heap_node node; /* in e->heap while WAITING and not held */
	pthread_cond_t cv;         /* monotonic: the thread's sleep, callback-done */
	pthread_t th;
	struct tmo *e;
	/* Dereferenced only while the record is WAITING (the timer is then
	 * pending, so the caller keeps it alive); afterwards only compared. */
	struct tmo_timer *timer;
	int64_t deadline;
	enum rec_state state;
	uint32_t waiters; /* cancels waiting for this callback; no reap while > 0 */
	/* Set (without the mutex) just before the callback is entered; until
	 * then later timers wait (see Order). */
	atomic_bool entered;
	struct rec *prev, *next; /* on e->fired while RUNNING / DONE */
};

struct rec_list {
	struct rec *head;
};

enum timer_state {
	T_IDLE = 0, /* all-zero timer: never armed, or its arm was prevented */
	T_PENDING,  /* `rec` is WAITING */
	T_FIRED,    /* its callback started (running or returned) */
};

/* What the engine keeps in the caller's timer (all under owner->m). */
struct thr_priv {
	struct tmo *owner;   /* engine of the last arm (TMO_EWRONGENGINE) */
	struct rec *rec;     /* valid while T_PENDING only */
	uint32_t state;      /* enum timer_state */
	uint32_t cancelling; /* cancels in progress: the pending arm is held */
};
TMO__PRIV_FITS(struct thr_priv);

extern const struct tmo_engine_ops tmo_engine_thread;

struct tmo {
	struct tmo_base base;
	pthread_mutex_t m;
	pthread_attr_t attr;
	struct tmo_heap heap;  /* WAITING records, except held ones */
	struct rec_list fired; /* RUNNING and DONE, not yet reaped */
	uint64_t npending, ndone;
	uint64_t fired_count, cancelled_count;
	/* Decremented after join/free, outside the mutex. */
	atomic_uint_fast64_t threads, records;
};

static inline struct thr_priv *priv(struct tmo_timer *t) { return TMO__PRIV(struct thr_priv, t); }

static inline struct rec *rec_of(struct tmo_heap_node *n)
{
	return tmo_container_of(n, struct rec, node);
}

static void list_add(struct rec_list *l, struct rec *r)
{
	r->prev = NULL;
	r->next = l->head;
	if (l->head != NULL)
		l->head->prev = r;
	l->head = r;
}

static void list_del(struct rec_list *l, struct rec *r)
{
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		l->head = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

/* Take r out of the heap.  No wake-up for the new top: see the blocked
 * wait in rec_thread. */
static void heap_take(struct tmo *e, struct rec *r) { tmo_heap_remove(&e->heap, &r->node); }

/* Under the mutex: has a timer due more than the resolution before r
 * decided to fire but not yet entered its callback? */
static bool earlier_not_entered(struct tmo *e, const struct rec *r)
{
	for (const struct rec *x = e->fired.head; x != NULL; x = x->next)
		if (x->state == R_RUNNING && x->deadline < r->deadline - THREAD_RESOLUTION_NS &&
		    !atomic_load_explicit(&x->entered, memory_order_acquire))
			return true;
	return false;
}

static void *rec_thread(void *arg)
{
	struct rec *r = arg;
	struct tmo *e = r->e;
	pthread_mutex_lock(&e->m);
	struct timespec ts = tmo__ts_from_ns(r->deadline);
	while (r->state == R_WAITING) {
		if (!tmo_heap_contains(&r->node)) {
			pthread_cond_wait(&r->cv, &e->m); /* held: the canceller decides */
			continue;
		}
		if (tmo_now_ns() < r->deadline) {
			pthread_cond_timedwait(&r->cv, &e->m, &ts);
			continue; /* never early: the clock decides, not the wait */
		}
		struct tmo_heap_node *top = tmo_heap_peek(&e->heap);
		if ((top != &r->node && top->deadline < r->deadline - THREAD_RESOLUTION_NS) ||
		    earlier_not_entered(e, r)) {
			/* An earlier one, due but not yet fired, goes first.  Look
			 * again shortly rather than be woken by it: a wake-up sent
			 * between its decision and its callback would let us preempt
			 * it and run first (measured: 3x the inversions). */
			struct timespec poll = tmo__ts_from_ns(tmo_now_ns() + BLOCKED_POLL_NS);
			pthread_cond_timedwait(&r->cv, &e->m, &poll);
			continue;
		}
		/* WAITING and not held: the timer is pending, its words valid. */
		struct tmo_timer *t = r->timer;
		heap_take(e, r);
		r->state = R_RUNNING;
		list_add(&e->fired, r);
		e->npending--;
		e->fired_count++;
		priv(t)->state = T_FIRED;
		priv(t)->rec = NULL;
		tmo_callback *cb = t->cb;
		void *cb_arg = t->arg;
		pthread_mutex_unlock(&e->m);
		atomic_store_explicit(&r->entered, true, memory_order_release);
		cb(t, cb_arg); /* may free or re-arm t: not touched again */
		pthread_mutex_lock(&e->m);
		r->state = R_DONE;
		e->ndone++;
		if (r->waiters > 0)
			pthread_cond_broadcast(&r->cv);
	}
	/* CANCELLED: the canceller joins us.  DONE: a later call reaps us. */
	pthread_mutex_unlock(&e->m);
	return NULL;
}

static void rec_free(struct tmo *e, struct rec *r)
{
	pthread_cond_destroy(&r->cv);
	tmo__free(r);
	atomic_fetch_sub_explicit(&e->records, 1, memory_order_relaxed);
}

static void join_free(struct tmo *e, struct rec *r)
{
	pthread_join(r->th, NULL);
	atomic_fetch_sub_explicit(&e->threads, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&process_threads, 1, memory_order_relaxed);
	rec_free(e, r);
}

/* Under the mutex: move the DONE records nobody waits on to a list (linked
 * through `next`), to be joined and freed after the unlock. */
static struct rec *take_done(struct tmo *e)
{
	struct rec *out = NULL;
	if (e->ndone == 0)
		return NULL;
	for (struct rec *r = e->fired.head, *nx; r != NULL; r = nx) {
		nx = r->next;
		if (r->state == R_DONE && r->waiters == 0) {
			list_del(&e->fired, r);
			e->ndone--;
			r->next = out;
			out = r;
		}
	}
	return out;
}

static void reap(struct tmo *e, struct rec *list)
{
	while (list != NULL) {
		struct rec *nx = list->next;
		join_free(e, list);
		list = nx;
	}
}

static int thr_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity to configure */
	struct tmo *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	e->base.ops = &tmo_engine_thread;
	int rc = tmo_heap_init(&e->heap, TMO_HEAP_DEFAULT_ARITY, 16);
	if (rc != 0) {
		tmo__free(e);
		return rc;
	}
	if (pthread_attr_init(&e->attr) != 0) {
		tmo_heap_fini(&e->heap);
		tmo__free(e);
		return TMO_ESYS;
	}
	if (pthread_attr_setstacksize(&e->attr, REC_STACK_SIZE) != 0 ||
	    pthread_mutex_init(&e->m, NULL) != 0) {
		pthread_attr_destroy(&e->attr);
		tmo_heap_fini(&e->heap);
		tmo__free(e);
		return TMO_ESYS;
	}
	atomic_init(&e->threads, 0);
	atomic_init(&e->records, 0);
	*out = e;
	return 0;
}

/* Under the mutex: a WAITING record's arm is cancelled; its thread will
 * leave and be joined by the caller of this. */
static void cancel_rec(struct tmo *e, struct rec *r)
{
	struct thr_priv *p = priv(r->timer);
	if (tmo_heap_contains(&r->node))
		heap_take(e, r);
	r->state = R_CANCELLED;
	pthread_cond_signal(&r->cv);
	p->state = T_IDLE;
	p->rec = NULL;
	e->npending--;
	e->cancelled_count++;
}

static void thr_destroy(struct tmo *e)
{
	struct rec *tojoin = NULL;
	pthread_mutex_lock(&e->m);
	for (;;) {
		/* Cancel every pending timer (no cancel runs now, so none is
		 * held: all are in the heap). */
		struct tmo_heap_node *n;
		while ((n = tmo_heap_peek(&e->heap)) != NULL) {
			struct rec *r = rec_of(n);
			cancel_rec(e, r);
			r->next = tojoin;
			tojoin = r;
		}
		/* Wait for a running callback; it may re-arm, so look again. */
		struct rec *run = e->fired.head;
		while (run != NULL && run->state != R_RUNNING)
			run = run->next;
		if (run == NULL)
			break;
		run->waiters++;
		while (run->state == R_RUNNING)
			pthread_cond_wait(&run->cv, &e->m);
		run->waiters--;
	}
	while (e->fired.head != NULL) {
		struct rec *r = e->fired.head;
		list_del(&e->fired, r);
		r->next = tojoin;
		tojoin = r;
	}
	pthread_mutex_unlock(&e->m);
	reap(e, tojoin);
	tmo_heap_fini(&e->heap);
	pthread_mutex_destroy(&e->m);
	pthread_attr_destroy(&e->attr);
	tmo__free(e);
}

static int thr_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                   void *arg)
{
	struct thr_priv *p = priv(t);
	struct rec *r = tmo__malloc(sizeof *r);
	if (r == NULL)
		return TMO_ENOMEM;
	if (tmo__cond_init_monotonic(&r->cv) != 0) {
		tmo__free(r);
		return TMO_ESYS;
	}
	tmo_heap_node_init(&r->node);
	r->e = e;
	r->timer = t;
	r->state = R_WAITING;
	r->waiters = 0;
	atomic_init(&r->entered, false);
	r->prev = r->next = NULL;
	int64_t deadline = tmo_now_ns() + timeout_ns;
	r->deadline = deadline;

	pthread_mutex_lock(&e->m);
	struct rec *done = take_done(e);
	if (p->owner != e)
		p->cancelling = 0; /* words last written by another engine */
	/* Held (not in the heap) while a cancel of this timer is in progress:
	 * that cancel will prevent it. */
	bool held = p->cancelling > 0;
	int rc = 0;
	if (p->owner == e && p->state == T_PENDING) {
		rc = TMO_EARMED;
	} else if (atomic_fetch_add_explicit(&process_threads, 1, memory_order_relaxed) >=
	           THREAD_ENGINE_MAX_THREADS) {
		atomic_fetch_sub_explicit(&process_threads, 1, memory_order_relaxed);
		rc = TMO_EAGAIN;
	} else {
		rc = held ? 0 : tmo_heap_push(&e->heap, &r->node, deadline);
		/* Created under the mutex: r->th is written before any other
		 * thread can compare it, and the new thread (which starts by
		 * taking the mutex) cannot fire before the record is complete.
		 * No wake-up for a new top: the new thread is the one to fire
		 * it, and the previous top, not due yet, needs none. */
		if (rc == 0) {
			rc = tmo__thread_create(&r->th, &e->attr, rec_thread, r);
			if (rc != 0 && !held)
				tmo_heap_remove(&e->heap, &r->node);
		}
		if (rc != 0)
			atomic_fetch_sub_explicit(&process_threads, 1, memory_order_relaxed);
	}
	if (rc != 0) {
		pthread_mutex_unlock(&e->m);
		pthread_cond_destroy(&r->cv);
		tmo__free(r);
		reap(e, done);
		return rc;
	}
	atomic_fetch_add_explicit(&e->threads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->records, 1, memory_order_relaxed);
	e->npending++;
	t->cb = cb;
	t->arg = arg;
	p->owner = e;
	p->rec = r;
	p->state = T_PENDING;
	pthread_mutex_unlock(&e->m);
	reap(e, done);
	return 0;
}

static int thr_cancel(struct tmo *e, struct tmo_timer *t)
{
	struct thr_priv *p = priv(t);
	pthread_mutex_lock(&e->m);
	struct rec *done = take_done(e);
	if (p->owner != e) {
		pthread_mutex_unlock(&e->m);
		reap(e, done);
		return p->owner == NULL ? TMO_ENOTARMED : TMO_EWRONGENGINE;
	}
	bool waited = false, self = false;
	pthread_t me = pthread_self();
	for (struct rec *r = e->fired.head; r != NULL && !self; r = r->next)
		self = r->timer == t && r->state == R_RUNNING && pthread_equal(r->th, me);
	/* Hold the pending arm, if any, while we wait (see the design). */
	if (p->cancelling++ == 0 && p->state == T_PENDING && tmo_heap_contains(&p->rec->node))
		heap_take(e, p->rec);
	/* From another thread: wait for every running invocation of the
	 * callback; restart the scan after each wait (the list changed). */
	for (struct rec *r = self ? NULL : e->fired.head; r != NULL;) {
		if (r->timer != t || r->state != R_RUNNING) {
			r = r->next;
			continue;
		}
		r->waiters++;
		while (r->state == R_RUNNING)
			pthread_cond_wait(&r->cv, &e->m);
		r->waiters--;
		waited = true;
		r = e->fired.head;
	}
	int res;
	struct rec *victim = NULL;
	switch ((enum timer_state)p->state) {
	case T_PENDING:
		victim = p->rec;
		cancel_rec(e, victim);
		res = TMO_CANCEL_PREVENTED;
		break;
	case T_FIRED:
		res = self ? TMO_CANCEL_SELF : waited ? TMO_CANCEL_WAITED : TMO_CANCEL_FIRED;
		break;
	default: /* idle: never armed, or prevented (the re-arm of a callback
	          * we waited for, by another cancel) */
		res = waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;
		break;
	}
	/* Nothing is pending now, and nothing can be armed until we unlock:
	 * no arm is left held. */
	p->cancelling--;
	pthread_mutex_unlock(&e->m);
	if (victim != NULL)
		join_free(e, victim);
	reap(e, done);
	return res;
}

static int thr_stats(struct tmo *e, struct tmo_stats *out)
{
	pthread_mutex_lock(&e->m);
	out->pending = e->npending;
	out->fired = e->fired_count;
	out->cancelled = e->cancelled_count;
	/* The heap's floor array is part of the engine's fixed size. */
	uint64_t heap_bytes = tmo_heap_bytes(&e->heap) - (uint64_t)e->heap.min_cap * sizeof(void *);
	pthread_mutex_unlock(&e->m);
	out->held_nodes = atomic_load_explicit(&e->records, memory_order_relaxed);
	/* Records and the heap's growth.  Not the threads' stacks (320 KiB of
	 * address space each, mostly untouched): `threads` counts them, and
	 * the retention scenario's RSS shows what they really cost. */
	out->held_bytes = out->held_nodes * sizeof(struct rec) + heap_bytes;
	out->threads = atomic_load_explicit(&e->threads, memory_order_relaxed);
	return 0;
}

static int thr_park(struct tmo *e, int on)
{
	(void)e;
	(void)on;
	return TMO_EINVAL; /* no single timer thread to park */
}

const struct tmo_engine_ops tmo_engine_thread = {
	.name = "thread",
	.summary = "one OS thread per armed timer (320 KiB stack, at most 10000 per "
	           "process) sleeping on its own monotonic condvar, fire order kept by "
	           "a heap; cancel wakes and joins it; no park (no single timer thread)",
	.caps = TMO_CAP_THREAD_PER_TIMER | TMO_CAP_CONCURRENT_CALLBACKS,
	.resolution_ns = THREAD_RESOLUTION_NS,
	.create = thr_create,
	.destroy = thr_destroy,
	.arm = thr_arm,
	.cancel = thr_cancel,
	.stats = thr_stats,
	.park = thr_park,
};
