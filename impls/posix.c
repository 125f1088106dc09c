/*
 * posix: one kernel POSIX timer per arm (timer_create on CLOCK_MONOTONIC),
 * its expiry delivered as a real-time signal to one engine thread that waits
 * for it with sigwaitinfo() and runs the callback.
 *
 * Design
 * ------
 * Signal: SIGRTMIN + TMO_POSIX_SIGNAL_OFFSET (6), sent with SIGEV_THREAD_ID
 * to the engine thread only.  The engine thread is created with that signal
 * blocked (pthread_attr_setsigmask_np), so it is taken only by sigwaitinfo;
 * no other thread's mask is touched.  THE APPLICATION MUST NOT USE THAT
 * SIGNAL NUMBER: the engine thread's sigwaitinfo also dequeues a
 * process-directed SIGRTMIN+6 (and drops it: only SI_TIMER signals carrying
 * a valid slot reference are acted on), and a process-directed SIGRTMIN+6
 * that lands on a thread which does not block it kills the process (the
 * default action).
 *
 * Why SIGEV_THREAD_ID and not SIGEV_THREAD: SIGEV_THREAD makes glibc start
 * (or hand off to) a helper thread per expiry that the engine does not own,
 * cannot join in destroy and cannot park; one engine thread keeps "callbacks
 * run on a thread the engine owns" and gives the park hook a loop.
 *
 * Slots: each arm takes a slot from an engine-owned table; the signal's
 * sival carries (generation << 32 | slot index), never a pointer, because a
 * signal may arrive after its arm was cancelled and the slot reused: the
 * kernel keeps a signal that was queued before timer_delete().  The slot's
 * atomic word (generation << 8 | state) decides everything:
 *   ARMED -> CANCELLED   cancel won (CAS): the callback will never run;
 *   ARMED -> FIRING      engine thread won (CAS) for the signal of that
 *                        generation: the callback runs once;
 *   FIRING -> DONE       the callback returned; the slot goes back to the
 *                        pool and the next arm bumps the generation.
 * A signal whose generation or state does not match is a late signal of a
 * cancelled arm and is dropped.  Slots live in chunks that never move or
 * shrink (type-stable: a stale index is always safe to read); the pool keeps
 * its high-water mark (56 bytes a slot), reported in held_bytes.
 *
 * The caller's timer holds ref = gen << 33 | fired << 32 | index, 0 when
 * idle (the core checks ownership, so a ref always names a slot of this
 * engine).  The engine thread sets the fired bit (after winning the CAS,
 * before the callback: it owns the timer then) and never touches the
 * timer after the callback starts.  The fired bit stops a late cancel of a
 * long-fired timer from ever matching a reused slot of the same generation.
 *
 * Cancel from another thread while the callback runs waits on wait_cv; the
 * engine thread, after the callback, waits until every such waiter has
 * looked (the "drain"), so a waiter cancels a re-arm made by the callback
 * before the engine can fire it again (a re-arming callback cannot starve
 * its canceller).  Cancel from inside the callback returns TMO_CANCEL_SELF.
 * A re-arm made while the callback runs is prevented only after that wait,
 * which is checked first across engines (core/internal.h): a wait that
 * would deadlock is refused (TMO_EDEADLK) before anything changed.
 *
 * Locks: arm takes free_mu (the slot free list, shared only by arming
 * threads; the engine thread and cancels return slots through a lock-free
 * stack); cancel takes none unless it must wait for a running callback.
 * The engine thread takes no lock in its loop except to wake such waiters,
 * and its park hook holds nothing: TMO_CAP_LOCKFREE_ARM.
 *
 * Costs (the design needs them): arm = one clock read, timer_create and
 * timer_settime (two syscalls; the kernel allocates a k_itimer and a
 * preallocated sigqueue entry, counted against RLIMIT_SIGPENDING: when it
 * runs out timer_create fails with EAGAIN -> TMO_EAGAIN); cancel = a CAS and
 * timer_delete (one syscall).  The deadline is absolute (TIMER_ABSTIME, the
 * clock read at arm entry) so arms keep their order however long the
 * syscalls take.  No user-space allocation in the steady state (the slot
 * pool grows by chunks), but the kernel allocates per arm: no
 * TMO_CAP_NO_ALLOC.  The kernel finds a timer by id in a table shared by the
 * whole machine, so the cost grows with every process's timers, not only
 * ours: measured (kernel 6.18, 2 vCPUs) single-thread arm+cancel 3.9 us
 * median, 55 us while ANOTHER process held 60000 idle timers, 37 us with
 * 50000 of our own pending.
 *
 * Destroy sets `stop` first (the engine thread then fires nothing more: a
 * signal it takes out of the queue from then on is dropped), cancels every
 * ARMED slot, stops and joins the thread (which waits for a running
 * callback), then cancels what that callback armed meanwhile.
 *
 * fork(): POSIX timers are not inherited, and the child has no engine
 * thread; the core refuses every call there (TMO_EFORKED).  destroy_forked
 * frees the slot table and the engine and makes no timer_delete(): the ids
 * it holds are the parent's, and in the child the same numbers may name
 * timers the child created since.  A callback that forks returns, in the
 * child, into a copy of the engine thread that is the child's only thread:
 * it ends there (the child exits 0).
 *
 * Resolution (what order is promised at): hrtimer expiry is exact to the
 * nanosecond and lateness is the signal delivery plus the engine thread's
 * wake-up (~20-60 us idle), but hrtimers live in per-CPU bases, so timers
 * expire on different CPUs and a late CPU queues an earlier deadline's
 * signal after a later one's.  The engine thread reorders what is queued
 * (impls/posix/loop.c); what arrives after the queue ran empty stays out of
 * order.  So resolution_ns = 1 ms (measurements in loop.c): order is kept
 * for deadlines further apart than that as far as measured; a CPU
 * stalled longer (a descheduled vCPU) can still invert two.  THAT IS THIS
 * ENGINE'S NAMED LIMIT ON GUARANTEE 4 (tmo.h): every signal of a live arm
 * that arrives after the loop ran a deadline more than the resolution after
 * its own is counted in tmo_stats' `skewed`, and the expiry scenario
 * reports those inversions as the limit (seen beside CPU hogs on 2 vCPUs:
 * one timer 1.056 ms out of order in 1e5).
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "posix/posix.h"

/* ---- create / destroy ----------------------------------------------------- */

static void destroy_sync(struct tmo *e)
{
	pthread_mutex_destroy(&e->free_mu);
	pthread_cond_destroy(&e->drain_cv);
	pthread_cond_destroy(&e->wait_cv);
	pthread_mutex_destroy(&e->wm);
	tmo__park_fini(&e->park);
}

static int px_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity of its own: deadlines are exact */
	struct tmo *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	e->signo = SIGRTMIN + TMO_POSIX_SIGNAL_OFFSET;
	e->free_head = PX_NIL;
	atomic_init(&e->ret_head, PX_NIL);
	e->dir = tmo__calloc(PX_MAX_CHUNKS, sizeof *e->dir);
	if (e->dir == NULL) {
		tmo__free(e);
		return TMO_ENOMEM;
	}
	if (e->signo > SIGRTMAX || tmo__park_init(&e->park) != 0 ||
	    pthread_mutex_init(&e->wm, NULL) != 0 ||
	    pthread_cond_init(&e->wait_cv, NULL) != 0 ||
	    pthread_cond_init(&e->drain_cv, NULL) != 0 ||
	    pthread_mutex_init(&e->free_mu, NULL) != 0) {
		tmo__free(e->dir);
		tmo__free(e);
		return TMO_ESYS; /* glibc's inits cannot fail */
	}

	/* The engine thread starts with the signal blocked, so there is no
	 * window in which a signal could take its default action there; the
	 * creating thread's own mask is left alone. */
	pthread_attr_t attr;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, e->signo);
	int rc = TMO_ESYS;
	if (pthread_attr_init(&attr) == 0) {
		if (pthread_attr_setsigmask_np(&attr, &set) == 0)
			rc = tmo__thread_create(&e->thread, &attr, tmo__px_main, e);
		pthread_attr_destroy(&attr);
	}
	if (rc != 0) {
		destroy_sync(e);
		tmo__free(e->dir);
		tmo__free(e);
		return rc;
	}
	pthread_mutex_lock(&e->wm);
	while (!e->started)
		pthread_cond_wait(&e->wait_cv, &e->wm);
	rc = e->start_rc;
	pthread_mutex_unlock(&e->wm);
	if (rc != 0) {
		pthread_join(e->thread, NULL); /* it has ended by itself */
		destroy_sync(e);
		tmo__free(e->dir);
		tmo__free(e);
		return rc;
	}
	*out = e;
	return 0;
}

/* Cancel every ARMED slot (the timer is engine-owned while pending, so its
 * private words are reset here: it is idle and may be armed again). */
static void sweep(struct tmo *e)
{
	uint32_t n = atomic_load_explicit(&e->nslots, memory_order_acquire);
	for (uint32_t i = 0; i < n; i++) {
		struct px_slot *s = slot_at(e, i);
		uint64_t w = atomic_load(&s->word);
		if ((w & 0xff) != S_ARMED)
			continue;
		if (!atomic_compare_exchange_strong(&s->word, &w, mkword(word_gen(w), S_CANCELLED)))
			continue; /* just fired */
		timer_delete(s->ktimer);
		atomic_store(&priv(s->timer)->ref, 0);
		atomic_fetch_sub(&e->pending, 1);
		atomic_fetch_add(&e->cancelled, 1);
		px_slot_put(e, i);
	}
}

static void px_destroy(struct tmo *e)
{
	tmo__park_release(&e->park);
	atomic_store(&e->stop, 1); /* from here px_fire starts no callback */
	sweep(e); /* kernel timers gone before the thread that receives them */
	tmo__px_ctl_kick(e);
	pthread_join(e->thread, NULL);
	sweep(e); /* arms made by a callback that ran during the first sweep */
	timer_delete(e->ctl);

	uint32_t n = atomic_load(&e->nslots);
	for (uint32_t c = 0; c < n / PX_CHUNK; c++)
		tmo__free(e->dir[c]);
	tmo__free(e->dir);
	destroy_sync(e);
	tmo__free(e);
}

/* In a child after fork(): see the header comment.  Chunks are published
 * (nslots) only after they are in dir, so a fork in the middle of a growth
 * leaves at most that one chunk unfreed, never a double free.  The mutexes
 * and condition variables are left alone (a parent thread may hold or wait
 * on them), and so are the callers' timers. */
static void px_destroy_forked(struct tmo *e)
{
	uint32_t n = atomic_load(&e->nslots);
	for (uint32_t c = 0; c < n / PX_CHUNK; c++)
		tmo__free(e->dir[c]);
	tmo__free(e->dir);
	tmo__free(e);
}

/* ---- arm / cancel ----------------------------------------------------------- */

/* Take a free slot: 0, TMO_EAGAIN (the table is full) or TMO_ENOMEM. */
static int px_slot_get(struct tmo *e, uint32_t *out)
{
	pthread_mutex_lock(&e->free_mu);
	uint32_t i = e->free_head;
	if (i == PX_NIL)
		i = atomic_exchange_explicit(&e->ret_head, PX_NIL, memory_order_acquire);
	if (i == PX_NIL) {
		uint32_t n = atomic_load_explicit(&e->nslots, memory_order_relaxed);
		if (n / PX_CHUNK >= PX_MAX_CHUNKS) {
			pthread_mutex_unlock(&e->free_mu);
			return TMO_EAGAIN;
		}
		struct px_slot *c = tmo__calloc(PX_CHUNK, sizeof *c);
		if (c == NULL) {
			pthread_mutex_unlock(&e->free_mu);
			return TMO_ENOMEM;
		}
		for (uint32_t k = 0; k < PX_CHUNK; k++)
			atomic_init(&c[k].next, k + 1 < PX_CHUNK ? n + k + 1 : PX_NIL);
		e->dir[n / PX_CHUNK] = c;
		/* Publish after the chunk pointer: the engine thread bounds-checks
		 * a signal's index against nslots before reading dir. */
		atomic_store_explicit(&e->nslots, n + PX_CHUNK, memory_order_release);
		i = n;
	}
	e->free_head = atomic_load_explicit(&slot_at(e, i)->next, memory_order_relaxed);
	pthread_mutex_unlock(&e->free_mu);
	*out = i;
	return 0;
}

static int px_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                  void *arg)
{
	struct px_priv *p = priv(t);
	/* The clock read is the design's: an absolute deadline keeps arm order
	 * whatever the syscalls below cost. */
	int64_t deadline = tmo_now_ns() + timeout_ns;
	uint64_t ref = atomic_load_explicit(&p->ref, memory_order_acquire);
	if (ref != 0 && !(ref & PX_FIRED_BIT))
		return TMO_EARMED;

	uint32_t idx;
	int rc = px_slot_get(e, &idx);
	if (rc != 0)
		return rc;
	struct px_slot *s = slot_at(e, idx);
	uint32_t gen = (word_gen(atomic_load_explicit(&s->word, memory_order_relaxed)) + 1) &
	               PX_GEN_MASK;
	if (gen == 0)
		gen = 1; /* ref 0 means idle; generation 0 is the control timer's */
	rc = tmo__px_make_ktimer(e, (uint64_t)gen << 32 | idx, &s->ktimer);
	if (rc != 0) {
		px_slot_put(e, idx);
		return rc;
	}
	s->timer = t;
	s->cb = cb;
	s->arg = arg;
	atomic_store_explicit(&s->deadline, deadline, memory_order_relaxed);
	t->cb = cb;
	t->arg = arg;
	atomic_store_explicit(&p->ref, mkref(gen, idx), memory_order_release);
	atomic_fetch_add_explicit(&e->pending, 1, memory_order_relaxed);
	/* Published before timer_settime: the signal cannot precede it. */
	atomic_store_explicit(&s->word, mkword(gen, S_ARMED), memory_order_release);

	struct itimerspec its = {.it_value = tmo__ts_from_ns(deadline)};
	if (timer_settime(s->ktimer, TIMER_ABSTIME, &its, NULL) != 0) {
		/* Not started, and nobody may cancel it yet (the caller
		 * serializes arm and cancel of one timer): undo. */
		atomic_store(&s->word, mkword(gen, S_CANCELLED));
		timer_delete(s->ktimer);
		atomic_store(&p->ref, 0);
		atomic_fetch_sub(&e->pending, 1);
		px_slot_put(e, idx);
		return TMO_ESYS;
	}
	return 0;
}

/* One lock-free attempt on the timer's current arm.  Returns PREVENTED (this
 * call won the CAS), FIRED/WAITED (the callback ran and returned),
 * ENOTARMED/WAITED (idle), or PX_BUSY (the engine thread won the CAS: the
 * callback is starting or running; the caller must wait). */
static int px_attempt(struct tmo *e, struct px_priv *p, const struct tmo_timer *t, bool waited)
{
	uint64_t ref = atomic_load_explicit(&p->ref, memory_order_acquire);
	for (;;) {
		if (ref == 0)
			return waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;
		uint32_t idx = ref_idx(ref), gen = ref_gen(ref);
		struct px_slot *s = slot_at(e, idx);
		if (ref & PX_FIRED_BIT) {
			/* FIRING until the callback returned (DONE, then reused). */
			if (atomic_load(&s->word) == mkword(gen, S_FIRING))
				return PX_BUSY;
			return waited ? TMO_CANCEL_WAITED : TMO_CANCEL_FIRED;
		}
		/* An arm made while t's callback still runs (its re-arm: ref was
		 * stored after `running`, and read with acquire): the caller waits
		 * for the callback, checked, before it prevents anything.  NULL t:
		 * from inside the callback, where the re-arm is prevented at once. */
		if (t != NULL && atomic_load(&e->running) == t)
			return PX_BUSY;
		uint64_t w = mkword(gen, S_ARMED);
		if (atomic_compare_exchange_strong(&s->word, &w, mkword(gen, S_CANCELLED))) {
			atomic_store(&p->ref, 0); /* before the slot can be reused */
			timer_delete(s->ktimer);  /* a signal already queued stays: dropped */
			atomic_fetch_sub_explicit(&e->pending, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&e->cancelled, 1, memory_order_relaxed);
			px_slot_put(e, idx);
			return TMO_CANCEL_PREVENTED;
		}
		if (w == mkword(gen, S_FIRING))
			return PX_BUSY;
		/* CANCELLED by a concurrent cancel (which resets ref before the
		 * slot is reused), or ref moved on: look again. */
		uint64_t again = atomic_load_explicit(&p->ref, memory_order_acquire);
		if (again == ref)
			return waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;
		ref = again;
	}
}

/* Is the callback of this timer's current arm running (or starting)? */
static bool px_busy(struct tmo *e, struct px_priv *p, struct tmo_timer *t)
{
	if (atomic_load(&e->running) == t)
		return true;
	uint64_t ref = atomic_load(&p->ref);
	struct px_slot *s = ref == 0 ? NULL : slot_at(e, ref_idx(ref));
	return s != NULL && atomic_load(&s->word) == mkword(ref_gen(ref), S_FIRING);
}

/* Whether the wait for t's busy callback would deadlock across engines
 * (core/internal.h): cb_ref read after busy was seen, busy looked at again
 * after it, so the ref is that invocation's (or a later one of t). */
static int px_check(struct tmo *e, struct px_priv *p, struct tmo_timer *t)
{
	uint64_t ref = atomic_load_explicit(&e->cb_ref, memory_order_acquire);
	return px_busy(e, p, t) ? tmo__wait_begin(ref) : 0;
}

/* Other thread: wait for the running callback, then attempt again while
 * still counted as a waiter (the engine thread holds off firing until every
 * waiter has looked).  With `attempt`, each wait is checked first: a wait
 * that would deadlock returns TMO_EDEADLK, nothing changed. */
static int px_wait_attempt(struct tmo *e, struct px_priv *p, struct tmo_timer *t, bool attempt)
{
	int res = TMO_CANCEL_PREVENTED;
	pthread_mutex_lock(&e->wm);
	atomic_fetch_add(&e->waiters, 1);
	for (;;) {
		while (res != TMO_EDEADLK && px_busy(e, p, t)) {
			if (attempt && px_check(e, p, t) != 0)
				res = TMO_EDEADLK;
			else
				pthread_cond_wait(&e->wait_cv, &e->wm);
		}
		if (!attempt || res == TMO_EDEADLK)
			break;
		res = px_attempt(e, p, t, true);
		if (res != PX_BUSY)
			break;
	}
	if (atomic_fetch_sub(&e->waiters, 1) == 1)
		pthread_cond_signal(&e->drain_cv);
	pthread_mutex_unlock(&e->wm);
	tmo__wait_end();
	return res;
}

static int px_cancel(struct tmo *e, struct tmo_timer *t)
{
	struct px_priv *p = priv(t);
	if (atomic_load_explicit(&p->ref, memory_order_acquire) == 0)
		return TMO_ENOTARMED;

	if (tmo__thread_engine == e) {
		/* On the engine thread only the current callback can run. */
		if (atomic_load_explicit(&e->running, memory_order_relaxed) == t &&
		    (atomic_load(&p->ref) & PX_FIRED_BIT))
			return TMO_CANCEL_SELF; /* not re-armed: it is us */
		int res = px_attempt(e, p, NULL, false);
		return res == PX_BUSY ? TMO_CANCEL_SELF : res;
	}

	if (atomic_load(&e->running) == t)
		return px_wait_attempt(e, p, t, true);
	int res = px_attempt(e, p, t, false);
	if (res == PX_BUSY)
		return px_wait_attempt(e, p, t, true);
	if (res == TMO_CANCEL_PREVENTED && atomic_load(&e->running) == t) {
		/* We cancelled the re-arm of a callback that is still running:
		 * the caller may free the timer once we return. */
		px_wait_attempt(e, p, t, false);
	}
	return res;
}

static int px_stats(struct tmo *e, struct tmo_stats *out)
{
	uint32_t n = atomic_load_explicit(&e->nslots, memory_order_acquire);
	out->pending = atomic_load_explicit(&e->pending, memory_order_relaxed);
	out->held_nodes = n; /* the slot pool keeps its high-water mark */
	out->held_bytes = (uint64_t)n * sizeof(struct px_slot);
	out->threads = 1;
	out->fired = atomic_load_explicit(&e->fired, memory_order_relaxed);
	out->skewed = atomic_load_explicit(&e->skewed, memory_order_relaxed);
	out->cancelled = atomic_load_explicit(&e->cancelled, memory_order_relaxed);
	return 0;
}

static int px_park(struct tmo *e, int on)
{
	return tmo__park_set(&e->park, on, NULL, NULL, tmo__px_ctl_kick, e);
}

static const struct tmo_testing_ops testing_ops = {.park = px_park};

const struct tmo_engine_ops tmo__engine_posix = {
	.name = "posix",
	.summary = "one kernel POSIX timer per arm (timer_create CLOCK_MONOTONIC, absolute, "
	           "SIGEV_THREAD_ID) delivering SIGRTMIN+6 to one sigwaitinfo engine thread "
	           "(the application must not use SIGRTMIN+6); slot index+generation in sival; "
	           "arm = 2 syscalls, cancel = 1; kernel timers limited by RLIMIT_SIGPENDING; "
	           "resolution 1 ms = per-CPU hrtimer expiry skew (queued signals are sorted)",
	.caps = TMO_CAP_LOCKFREE_ARM | TMO_CAP_PARK,
	.resolution_ns = PX_RESOLUTION,
	TMO__ENGINE_OPS(px),
	.testing = &testing_ops,
};
