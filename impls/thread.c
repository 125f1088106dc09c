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
 * Order: a due thread calls its callback only on its turn, handed on in
 * deadline order without polling (impls/thread/turns.c).
 *
 * Threads and memory: impls/thread/records.c.
 *
 * Cancel that finds the timer's callback running on another thread waits on
 * that record's condvar until the callback returned (a `waiters` count keeps
 * the record from being reaped meanwhile), then looks again: a re-arm made
 * by the callback is cancelled (PREVENTED).  Several invocations of one
 * timer's callback may run at once (a callback re-arms with a timeout
 * shorter than its own run): cancel waits for every one of them (a scan of
 * the callbacks running now).  While a cancel is in progress the timer's
 * pending arm is held out of the heap and does not fire even when due
 * (`cancelling` in the timer's words), so a chain of re-arming callbacks
 * cannot keep the canceller waiting forever, the arm that is pending when
 * the waiting ends is the one cancel prevents, and the held record does not
 * delay any other timer.  The last cancel out always finds the held arm
 * (none can appear after its decision), so no record stays held.  From
 * inside one of the timer's own invocations cancel never waits (two
 * invocations cancelling each other would wait for each other): it prevents
 * a pending re-arm or returns SELF at once.  Each wait for an invocation on
 * another thread is checked first across engines and timers (a callback
 * waiting, through a chain, for the canceller's own: core/internal.h); a
 * refused cancel (TMO_EDEADLK) puts its held arm back and changes nothing.
 *
 * Lifecycle
 * ---------
 * Each thread marks itself as the engine's (tmo__thread_engine), so the core
 * refuses destroy and park from a callback.  Destroy first closes the engine
 * (no waiting record decides to fire any more), cancels every waiting
 * record, waits for the running callbacks (arms they make are cancelled in
 * turn), and joins everything: nothing runs after it returns.  fork(): a
 * prepare handler takes every thread engine's mutex, so a child inherits
 * consistent sets; in the child the core refuses every call, and
 * destroy_forked frees the records' memory without joining (the threads do
 * not exist there) and without touching the inherited mutex and condvars
 * (their waiters were the parent's threads).
 *
 * Stacks: each thread gets TMO_CALLBACK_STACK_MIN for the callback plus a
 * reserve (320 KiB of address space, a few pages of it touched; 1 MiB under
 * sanitizers).  A process-wide cap keeps the engine from exhausting the
 * system's thread ids.
 *
 * No single timer thread: no park hook (tmo_testing_park: TMO_EINVAL).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "core/forkset.h"
#include "core/internal.h"
#include "core/list.h"
#include "ds/heap.h"
#include "thread/thread.h"

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

/* The record whose callback this thread runs (NULL outside callbacks). */
static _Thread_local struct rec *cur_rec;

static inline struct thr_priv *priv(struct tmo_timer *t) { return thr_priv_of(t); }

/* ---- the record's thread ------------------------------------------------------ */

static void *rec_thread(void *arg)
{
	struct rec *r = arg;
	struct tmo *e = r->e;
	tmo__thread_enter(e, "thread");
	r->tid = gettid();
	pthread_mutex_lock(&e->m);
	struct timespec ts = tmo__ts_from_ns(r->deadline);
	while (r->state == R_WAITING) {
		if (!tmo__heap_contains(&r->node) || e->closing) {
			/* Held by a cancel, or the engine is being destroyed:
			 * the canceller (or destroy) decides. */
			pthread_cond_wait(&r->cv, &e->m);
			continue;
		}
		if (tmo_now_ns() < r->deadline) {
			pthread_cond_timedwait(&r->cv, &e->m, &ts);
			continue; /* never early: the clock decides, not the wait */
		}
		struct rec *pred = NULL;
		int64_t until = 0;
		enum turn turn = tmo__thr_my_turn(e, r, &pred, &until);
		if (turn == TURN_BLOCKED) {
			/* An earlier record's thread has not fired yet: it (or
			 * whoever takes it out of the heap) wakes us. */
			if (r->in != IN_BLOCKED)
				tmo__thr_set_in(e, r, IN_BLOCKED);
			pthread_cond_wait(&r->cv, &e->m);
			continue;
		}
		tmo__thr_set_in(e, r, IN_NONE);
		if (turn == TURN_ENTERING) {
			/* An earlier one fires: until its callback returns (its
			 * thread wakes us) or we should look whether it is past
			 * the call.  Pinned meanwhile. */
			struct timespec grace = tmo__ts_from_ns(until);
			pred->waiters++;
			pthread_cond_timedwait(&pred->cv, &e->m, &grace);
			tmo__thr_unwait(e, pred);
			continue;
		}
		/* WAITING and not held: the timer is pending, its words valid. */
		struct tmo_timer *t = r->timer;
		tmo__thr_unqueue(e, r); /* out of the heap: later ones may decide now, */
		tmo__thr_set_in(e, r, IN_ENTERING); /* but call theirs only after ours */
		r->state = R_RUNNING;
		tmo_list_add(&e->running, &r->run_link);
		e->npending--;
		e->fired_count++;
		priv(t)->state = T_FIRED;
		priv(t)->rec = NULL;
		tmo_callback *cb = t->cb;
		void *cb_arg = t->arg;
		r->ref = tmo__cb_begin(); /* read by cancels under the mutex */
		pthread_mutex_unlock(&e->m);
		cur_rec = r;
		/* Recorded just before the call (see Order). */
		struct timespec cpu;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
		r->entered_cpu = (int64_t)cpu.tv_sec * TMO_NSEC_PER_SEC + cpu.tv_nsec;
		r->entered_at = tmo_now_ns();
		atomic_store_explicit(&r->entered, true, memory_order_release);
		cb(t, cb_arg); /* may free or re-arm t: not touched again */
		tmo__end_if_forked(e);
		cur_rec = NULL;
		pthread_mutex_lock(&e->m);
		tmo__cb_end();
		tmo__thr_set_in(e, r, IN_NONE); /* if nobody took it out of `entering` */
		r->state = R_DONE;
		tmo_list_del(&r->run_link);
		if (r->waiters > 0) /* cancels, and later timers waiting for our turn */
			pthread_cond_broadcast(&r->cv); /* the last waiter moves it to done */
		else
			tmo__thr_done_add(e, r);
	}
	/* CANCELLED: the canceller joins us.  DONE: a later call reaps us. */
	pthread_mutex_unlock(&e->m);
	return NULL;
}

/* ---- fork ------------------------------------------------------------------ */

/* Every live thread engine, so that fork() can take their mutexes: a child
 * then inherits every engine's sets whole, never half-updated. */
TMO__FORK_SET(static, forks, fork_prepare, fork_parent, fork_child);

static void fork_prepare(void)
{
	pthread_mutex_lock(&forks.mu);
	tmo_list_for_each(e, &forks.engines, struct tmo, fork_link)
		pthread_mutex_lock(&e->m);
}

static void fork_parent(void)
{
	tmo_list_for_each(e, &forks.engines, struct tmo, fork_link)
		pthread_mutex_unlock(&e->m);
	pthread_mutex_unlock(&forks.mu);
}

/* The child has none of the parent's threads: no engine it inherited will
 * ever lock its mutex again (the core refuses every call; destroy_forked
 * does not lock), so they leave the set and the thread count. */
static void fork_child(void)
{
	tmo_list_init(&forks.engines);
	atomic_store_explicit(&tmo__thr_process_threads, 0, memory_order_relaxed);
	pthread_mutex_unlock(&forks.mu);
}

/* ---- ops -------------------------------------------------------------------- */

static int thr_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity to configure */
	struct tmo *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	int rc = tmo__heap_init(&e->heap, TMO_HEAP_DEFAULT_ARITY, 16);
	if (rc != 0) {
		tmo__free(e);
		return rc;
	}
	if (pthread_attr_init(&e->attr) != 0) {
		tmo__heap_fini(&e->heap);
		tmo__free(e);
		return TMO_ESYS;
	}
	if (pthread_attr_setstacksize(&e->attr, REC_STACK_SIZE) != 0 ||
	    pthread_mutex_init(&e->m, NULL) != 0) {
		pthread_attr_destroy(&e->attr);
		tmo__heap_fini(&e->heap);
		tmo__free(e);
		return TMO_ESYS;
	}
	atomic_init(&e->threads, 0);
	atomic_init(&e->records, 0);
	tmo_list_init(&e->running);
	tmo_list_init(&e->all);
	tmo__fork_set_join(&forks, &e->fork_link);
	*out = e;
	return 0;
}

/* Under the mutex: a WAITING record's arm is cancelled; its thread will
 * leave and be joined by the caller of this. */
static void cancel_rec(struct tmo *e, struct rec *r)
{
	struct thr_priv *p = priv(r->timer);
	tmo__thr_unqueue(e, r);
	r->state = R_CANCELLED;
	pthread_cond_signal(&r->cv);
	p->state = T_IDLE;
	p->rec = NULL;
	e->npending--;
	e->cancelled_count++;
}

static void thr_destroy(struct tmo *e)
{
	tmo__fork_set_leave(&forks, &e->fork_link);
	struct rec *tojoin = NULL;
	pthread_mutex_lock(&e->m);
	e->closing = true; /* from now on no waiting record fires */
	for (;;) {
		/* Cancel every waiting timer.  A held one (a callback's cancel
		 * in progress) is that cancel's to resolve before its callback
		 * returns, which we wait for below. */
		struct tmo_heap_node *n;
		while ((n = tmo__heap_peek(&e->heap)) != NULL) {
			struct rec *r = rec_of(n);
			cancel_rec(e, r);
			r->next = tojoin;
			tojoin = r;
		}
		/* Wait for a running callback; it may arm again, so look again. */
		if (tmo_list_empty(&e->running))
			break;
		struct rec *run = tmo_container_of(e->running.next, struct rec, run_link);
		run->waiters++;
		while (run->state == R_RUNNING)
			pthread_cond_wait(&run->cv, &e->m);
		tmo__thr_unwait(e, run);
	}
	pthread_mutex_unlock(&e->m);
	tmo__thr_reap(e, tojoin);
	/* `done` only now: a cancelled record's thread that was waiting for
	 * an earlier record's callback (TURN_ENTERING, pinning it) may wake
	 * as that record's last waiter and move it to `done` on its way out
	 * (destroy/thread saw such a record leak, its thread unjoined, once
	 * in a CI run, when `done` was taken before these joins).  No other
	 * thread can add to it now: no record waits or runs, and a DONE
	 * record's thread has left its loop. */
	pthread_mutex_lock(&e->m);
	struct rec *done = tmo__thr_take_done(e);
	pthread_mutex_unlock(&e->m);
	tmo__thr_reap(e, done);
	tmo__heap_fini(&e->heap);
	pthread_mutex_destroy(&e->m);
	pthread_attr_destroy(&e->attr);
	tmo__free(e);
}

/* In a child after fork: free the copies.  The records' threads are the
 * parent's; the mutex and the condvars may have had the parent's threads as
 * waiters (destroying such a condvar waits for them: forever, here), so
 * they are left alone, as is the attr (plain memory in it). */
static void thr_destroy_forked(struct tmo *e)
{
	tmo__heap_fini(&e->heap); /* first: it writes to the nodes it still holds */
	tmo_list_for_each_safe(r, &e->all, struct rec, all_link)
		tmo__free(r);
	tmo__free(e);
}

static int thr_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                   void *arg)
{
	struct thr_priv *p = priv(t);
	struct rec *r = tmo__calloc(1, sizeof *r);
	if (r == NULL)
		return TMO_ENOMEM;
	if (tmo__cond_init_monotonic(&r->cv) != 0) {
		tmo__free(r);
		return TMO_ESYS;
	}
	tmo__heap_node_init(&r->node);
	r->e = e;
	r->timer = t;
	r->state = R_WAITING;
	int64_t deadline = tmo_now_ns() + timeout_ns;
	r->deadline = deadline;

	pthread_mutex_lock(&e->m);
	struct rec *done = tmo__thr_take_done(e);
	/* Held (not in the heap) while a cancel of this timer is in progress:
	 * that cancel will prevent it. */
	bool held = p->cancelling > 0;
	int rc = 0;
	if (p->state == T_PENDING) {
		rc = TMO_EARMED;
	} else if (atomic_fetch_add_explicit(&tmo__thr_process_threads, 1, memory_order_relaxed) >=
	           THREAD_ENGINE_MAX_THREADS) {
		atomic_fetch_sub_explicit(&tmo__thr_process_threads, 1, memory_order_relaxed);
		rc = TMO_EAGAIN;
	} else {
		/* A new record never takes a turn from anyone: it is not due
		 * yet, and every blocked record is. */
		rc = held ? 0 : tmo__heap_push(&e->heap, &r->node, deadline);
		/* Created under the mutex: r->th is written before any other
		 * thread can compare it, and the new thread (which starts by
		 * taking the mutex) cannot fire before the record is complete. */
		if (rc == 0) {
			rc = tmo__thread_create(&r->th, &e->attr, rec_thread, r);
			if (rc != 0 && !held)
				tmo__heap_remove(&e->heap, &r->node);
		}
		if (rc != 0)
			atomic_fetch_sub_explicit(&tmo__thr_process_threads, 1, memory_order_relaxed);
	}
	if (rc != 0) {
		pthread_mutex_unlock(&e->m);
		pthread_cond_destroy(&r->cv);
		tmo__free(r);
		tmo__thr_reap(e, done);
		return rc;
	}
	atomic_fetch_add_explicit(&e->threads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->records, 1, memory_order_relaxed);
	tmo_list_add(&e->all, &r->all_link);
	e->npending++;
	t->cb = cb;
	t->arg = arg;
	p->rec = r;
	p->state = T_PENDING;
	pthread_mutex_unlock(&e->m);
	tmo__thr_reap(e, done);
	return 0;
}

/* Under the mutex: a cancel refused (TMO_EDEADLK) lets go of its hold; the
 * last one out puts a held arm back in the heap, as if never held.  0, or
 * TMO_ENOMEM when the heap cannot take it back (the hold stays). */
static int thr_unhold(struct tmo *e, struct thr_priv *p)
{
	if (p->cancelling == 1 && p->state == T_PENDING && !tmo__heap_contains(&p->rec->node)) {
		int rc = tmo__heap_push(&e->heap, &p->rec->node, p->rec->deadline);
		if (rc != 0)
			return rc;
		pthread_cond_signal(&p->rec->cv); /* it slept held: look again */
	}
	p->cancelling--;
	return 0;
}

/* Under the mutex: wait for every running invocation of t's callback;
 * restart the scan after each wait (the list changed).  Each wait is
 * checked across engines first (core/internal.h): 1 waited, 0 nothing to
 * wait for, TMO_EDEADLK refused (the hold let go).  A refusal whose held
 * arm cannot go back (out of memory) waits unchecked instead. */
static int thr_wait_running(struct tmo *e, struct thr_priv *p, struct tmo_timer *t)
{
	struct rec *r;
	int waited = 0;
	bool check = true;
	while ((r = tmo__thr_running_of(e, t)) != NULL) {
		if (check && tmo__wait_begin(r->ref) != 0) {
			if (thr_unhold(e, p) == 0)
				return TMO_EDEADLK;
			check = false;
		}
		r->waiters++;
		while (r->state == R_RUNNING)
			pthread_cond_wait(&r->cv, &e->m);
		tmo__thr_unwait(e, r);
		waited = 1;
	}
	return waited;
}

static int thr_cancel(struct tmo *e, struct tmo_timer *t)
{
	struct thr_priv *p = priv(t);
	pthread_mutex_lock(&e->m);
	bool self = cur_rec != NULL && cur_rec->e == e && cur_rec->timer == t;
	/* Hold the pending arm, if any, while we wait (see the design). */
	if (p->cancelling++ == 0 && p->state == T_PENDING)
		tmo__thr_unqueue(e, p->rec);
	/* From another thread: wait for every running invocation. */
	int w = self ? 0 : thr_wait_running(e, p, t);
	tmo__wait_end();
	if (w < 0) {
		struct rec *done = tmo__thr_take_done(e);
		pthread_mutex_unlock(&e->m);
		tmo__thr_reap(e, done);
		return w; /* TMO_EDEADLK: nothing changed, the callback still runs */
	}
	bool waited = w > 0;
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
	struct rec *done = tmo__thr_take_done(e);
	if (victim != NULL) {
		victim->next = done;
		done = victim;
	}
	pthread_mutex_unlock(&e->m);
	tmo__thr_reap(e, done);
	return res;
}

static int thr_stats(struct tmo *e, struct tmo_stats *out)
{
	pthread_mutex_lock(&e->m);
	out->pending = e->npending;
	out->fired = e->fired_count;
	out->cancelled = e->cancelled_count;
	/* The heap's floor array is part of the engine's fixed size. */
	uint64_t heap_bytes = tmo__heap_bytes(&e->heap) - (uint64_t)e->heap.min_cap * sizeof(void *);
	pthread_mutex_unlock(&e->m);
	out->held_nodes = atomic_load_explicit(&e->records, memory_order_relaxed);
	/* Records and the heap's growth.  Not the threads' stacks (320 KiB of
	 * address space each, mostly untouched): `threads` counts them, and
	 * the retention scenario's RSS shows what they really cost. */
	out->held_bytes = out->held_nodes * sizeof(struct rec) + heap_bytes;
	out->threads = atomic_load_explicit(&e->threads, memory_order_relaxed);
	return 0;
}

const struct tmo_engine_ops tmo__engine_thread = {
	.name = "thread",
	.summary = "one OS thread per armed timer (320 KiB stack, at most 10000 per "
	           "process) sleeping on its own monotonic condvar; fire order by turns "
	           "handed on in deadline order (a heap), no polling; cancel wakes and "
	           "joins it; no park (no single timer thread)",
	.caps = TMO_CAP_THREAD_PER_TIMER | TMO_CAP_CONCURRENT_CALLBACKS,
	.resolution_ns = THREAD_RESOLUTION_NS,
	TMO__ENGINE_OPS(thr),
};
