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
 * One engine mutex guards every record's state, the two record lists and
 * the private words of the timers armed here; each record has its own
 * condvar, so a cancel wakes exactly one thread.  (A mutex per record as
 * well was considered: every transition must update the record and the
 * timer's words together, and arm/fire must update the engine's lists too,
 * so a per-record mutex would be taken with the engine one anyway.)
 *
 * Exactly once: a record goes WAITING -> CANCELLED (cancel or destroy) or
 * WAITING -> RUNNING -> DONE (its thread), only under the mutex; the timer's
 * own state (IDLE / PENDING / FIRED) changes in the same critical section.
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
 * cancel is in progress the timer's pending arm does not fire even when due
 * (`cancelling` in the timer's words), so a chain of re-arming callbacks
 * cannot keep the canceller waiting forever, and the arm that is pending
 * when the waiting ends is the one cancel prevents.  From inside one of the
 * timer's own invocations cancel never waits (two invocations cancelling
 * each other would wait for each other): it prevents a pending re-arm or
 * returns SELF at once.
 *
 * Threads get a small stack (64 KiB; more under sanitizers) so ten thousand
 * pending timers fit.  Callbacks run on that stack.
 *
 * No single timer thread: park() returns TMO_EINVAL.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REC_STACK_SIZE (1024u * 1024u)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REC_STACK_SIZE (1024u * 1024u)
#endif
#endif
#ifndef REC_STACK_SIZE
#define REC_STACK_SIZE (64u * 1024u)
#endif

/* Threads all thread engines of the process may hold at once; arm beyond
 * it returns TMO_EAGAIN.  The kernel's own limit is system-wide (pid_max is
 * 32768 on this machine's kernel): running into it makes every process's
 * fork and pthread_create fail, not just ours.  Ten thousand pending timers
 * fit, and two test processes at the limit still leave room. */
#define THREAD_ENGINE_MAX_THREADS 10000
static atomic_int process_threads;

enum rec_state {
	R_WAITING,   /* thread sleeps until the deadline */
	R_CANCELLED, /* its canceller (or destroy) joins the thread */
	R_RUNNING,   /* the callback runs on the record's thread */
	R_DONE,      /* callback returned; the thread is finished or finishing */
};

struct rec {
	pthread_cond_t cv; /* monotonic: the thread's sleep, and callback-done */
	pthread_t th;
	struct tmo *e;
	/* Dereferenced only while the record is WAITING (the timer is then
	 * pending, so the caller keeps it alive); afterwards only compared. */
	struct tmo_timer *timer;
	int64_t deadline;
	enum rec_state state;
	uint32_t waiters; /* cancels waiting for this callback; no reap while > 0 */
	struct rec *prev, *next;
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
	uint32_t cancelling; /* cancels in progress: its pending arm holds fire */
};
TMO__PRIV_FITS(struct thr_priv);

extern const struct tmo_engine_ops tmo_engine_thread;

struct tmo {
	struct tmo_base base;
	pthread_mutex_t m;
	pthread_attr_t attr;
	struct rec_list waiting; /* R_WAITING */
	struct rec_list fired;   /* R_RUNNING and R_DONE, not yet reaped */
	uint64_t npending, ndone;
	uint64_t fired_count, cancelled_count;
	/* Decremented after join/free, outside the mutex. */
	atomic_uint_fast64_t threads, records;
};

static inline struct thr_priv *priv(struct tmo_timer *t) { return TMO__PRIV(struct thr_priv, t); }

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

static void *rec_thread(void *arg)
{
	struct rec *r = arg;
	struct tmo *e = r->e;
	pthread_mutex_lock(&e->m);
	struct timespec ts = tmo__ts_from_ns(r->deadline);
	while (r->state == R_WAITING) {
		/* WAITING: the timer is pending, so its words may be read. */
		if (priv(r->timer)->cancelling > 0) {
			pthread_cond_wait(&r->cv, &e->m); /* the canceller decides */
			continue;
		}
		int rc = pthread_cond_timedwait(&r->cv, &e->m, &ts);
		/* Fire only when the clock agrees: never early. */
		if (rc == ETIMEDOUT && r->state == R_WAITING && priv(r->timer)->cancelling == 0 &&
		    tmo_now_ns() >= r->deadline) {
			struct tmo_timer *t = r->timer;
			r->state = R_RUNNING;
			list_del(&e->waiting, r);
			list_add(&e->fired, r);
			e->npending--;
			e->fired_count++;
			priv(t)->state = T_FIRED;
			priv(t)->rec = NULL;
			tmo_callback *cb = t->cb;
			void *cb_arg = t->arg;
			pthread_mutex_unlock(&e->m);
			cb(t, cb_arg); /* may free or re-arm t: not touched again */
			pthread_mutex_lock(&e->m);
			r->state = R_DONE;
			e->ndone++;
			if (r->waiters > 0)
				pthread_cond_broadcast(&r->cv);
		}
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

/* Under the mutex: move the DONE records nobody waits on to *out (linked
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
	(void)cfg; /* no granularity of its own */
	struct tmo *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	e->base.ops = &tmo_engine_thread;
	if (pthread_attr_init(&e->attr) != 0) {
		tmo__free(e);
		return TMO_ESYS;
	}
	if (pthread_attr_setstacksize(&e->attr, REC_STACK_SIZE) != 0 ||
	    pthread_mutex_init(&e->m, NULL) != 0) {
		pthread_attr_destroy(&e->attr);
		tmo__free(e);
		return TMO_ESYS;
	}
	atomic_init(&e->threads, 0);
	atomic_init(&e->records, 0);
	*out = e;
	return 0;
}

static void thr_destroy(struct tmo *e)
{
	struct rec *tojoin = NULL;
	pthread_mutex_lock(&e->m);
	for (;;) {
		/* Cancel every pending timer. */
		while (e->waiting.head != NULL) {
			struct rec *r = e->waiting.head;
			list_del(&e->waiting, r);
			r->state = R_CANCELLED;
			priv(r->timer)->state = T_IDLE;
			priv(r->timer)->rec = NULL;
			e->npending--;
			e->cancelled_count++;
			pthread_cond_signal(&r->cv);
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
	r->e = e;
	r->timer = t;
	r->deadline = tmo_now_ns() + timeout_ns;
	r->state = R_WAITING;
	r->waiters = 0;
	r->prev = r->next = NULL;

	pthread_mutex_lock(&e->m);
	struct rec *done = take_done(e);
	int rc = 0;
	if (p->owner == e && p->state == T_PENDING) {
		rc = TMO_EARMED;
	} else if (atomic_fetch_add_explicit(&process_threads, 1, memory_order_relaxed) >=
	           THREAD_ENGINE_MAX_THREADS) {
		atomic_fetch_sub_explicit(&process_threads, 1, memory_order_relaxed);
		rc = TMO_EAGAIN;
	} else {
		/* Created under the mutex: r->th is written before any other
		 * thread can compare it, and the new thread (which starts by
		 * taking the mutex) cannot fire before it is on the list. */
		rc = tmo__thread_create(&r->th, &e->attr, rec_thread, r);
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
	list_add(&e->waiting, r);
	e->npending++;
	t->cb = cb;
	t->arg = arg;
	if (p->owner != e)
		p->cancelling = 0; /* words last written by another engine */
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
	p->cancelling++;
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
		victim->state = R_CANCELLED;
		list_del(&e->waiting, victim);
		pthread_cond_signal(&victim->cv);
		e->npending--;
		e->cancelled_count++;
		p->state = T_IDLE;
		p->rec = NULL;
		res = TMO_CANCEL_PREVENTED;
		break;
	case T_FIRED:
		res = self ? TMO_CANCEL_SELF : waited ? TMO_CANCEL_WAITED : TMO_CANCEL_FIRED;
		break;
	default: /* idle: never armed, or prevented (by us: the re-arm of a
	          * callback we waited for was cancelled by another cancel) */
		res = waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;
		break;
	}
	/* Every cancel prevents the arm it finds pending, so none should be
	 * pending here; should one be, the last cancel out must not leave its
	 * thread held (it sleeps without a timeout while `cancelling`). */
	if (--p->cancelling == 0 && p->state == T_PENDING)
		pthread_cond_signal(&p->rec->cv);
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
	pthread_mutex_unlock(&e->m);
	out->held_nodes = atomic_load_explicit(&e->records, memory_order_relaxed);
	out->held_bytes = out->held_nodes * sizeof(struct rec);
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
	.summary = "one OS thread per armed timer (64 KiB stack, at most 10000 per "
	           "process) sleeping on its own monotonic condvar; cancel wakes and "
	           "joins it; no park (no single timer thread)",
	.caps = TMO_CAP_THREAD_PER_TIMER | TMO_CAP_CONCURRENT_CALLBACKS,
	/* Deadlines are exact, but each callback wakes on its own thread, so
	 * the order of two timers is only as good as the scheduler's wake-up
	 * latency: ~50 us idle, but on this loaded 2-core machine a TSan run
	 * inverted two timers 1.05 ms apart.  1 ms is what release builds keep
	 * (contract order test, 2 ms gaps); sanitizer runs may still not. */
	.resolution_ns = TMO_NSEC_PER_MSEC,
	.create = thr_create,
	.destroy = thr_destroy,
	.arm = thr_arm,
	.cancel = thr_cancel,
	.stats = thr_stats,
	.park = thr_park,
};
