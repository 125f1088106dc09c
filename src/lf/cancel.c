/*
 * cancel: what the application's threads (and callbacks) run to take an arm
 * back, exactly once against the timer thread's fire by the CAS on the
 * node's state word (arm.c has the ordering; lf.h the design).
 */
#include <stdlib.h>

#include "schedule.h"
#include "clock.h"
#include "pool.h"
#include "depot.h"
#include "base.h"
#include "rec.h"
#include "cancel.h"
#include "hook.h"

static void count_prevented(struct tmo *e)
{
	struct lf_rec *r = lf_rec_get(e);
	if (r != NULL)
		lf_bump(&r->prevented);
	else if (tmo__thread_engine == e)
		lf_bump(&e->tt_rec->prevented);
	else
		atomic_fetch_add_explicit(&e->prevented_bare, 1, memory_order_relaxed);
}

/* Waits for a callback on the timer thread check first, across engines,
 * whether the wait would deadlock (core/internal.h): cb_ref is read after
 * FIRING or `running` was seen (the timer thread stores it before either,
 * with release) and the state is looked at again after it, so the ref is
 * the invocation waited for or a later one of the same timer.  A refusal
 * (TMO_EDEADLK) comes before the cancel changed anything; cancel_slow
 * withdraws what was published when it returns. */

/* Wait until the callback of (n, gen) has returned: 0, TMO_EDEADLK, or
 * TMO_CANCEL_SELF on the timer thread (one callback at a time: ours). */
static int wait_firing(struct tmo *e, struct lf_node *n, uint64_t gen)
{
	if (tmo__thread_engine == e)
		return TMO_CANCEL_SELF;
	for (;;) {
		uint32_t v = tmo__lf_ec_value(&e->done_ec);
		uint64_t ref = atomic_load_explicit(&e->cb_ref, memory_order_acquire);
		if (atomic_load_explicit(&n->state, memory_order_acquire) != lf_st(gen, LF_FIRING))
			return 0;
		if (tmo__wait_begin(ref) != 0)
			return TMO_EDEADLK;
		tmo__lf_ec_wait(&e->done_ec, v, INT64_MAX);
	}
}

/* Wait until t's callback (`running`) has returned; 0, or TMO_EDEADLK when
 * `check` (a wait already checked for this invocation passes at once). */
static int wait_running(struct tmo *e, struct tmo_timer *t, bool check)
{
	for (;;) {
		uint32_t v = tmo__lf_ec_value(&e->done_ec);
		uint64_t ref = atomic_load_explicit(&e->cb_ref, memory_order_acquire);
		if (atomic_load_explicit(&e->running, memory_order_acquire) != t)
			return 0;
		if (check && tmo__wait_begin(ref) != 0)
			return TMO_EDEADLK;
		tmo__lf_ec_wait(&e->done_ec, v, INT64_MAX);
	}
}

/* Before a filed arm is prevented: does t's callback still run on the timer
 * thread (it made this arm, a re-arm), so that prevented_return must wait
 * for it?  The word was read with acquire, and the callback's `running`
 * store precedes its arm's word store: `running` != t now means that
 * callback has returned.  1 (it runs, and the wait was checked: what was
 * published stays until cancel_slow returns), 0 (no wait), or TMO_EDEADLK
 * (the wait would deadlock: prevent nothing). */
static int check_running(struct tmo *e, struct tmo_timer *t)
{
	if (LF_LIKELY(atomic_load_explicit(&e->running, memory_order_acquire) != t) ||
	    tmo__thread_engine == e)
		return 0;
	uint64_t ref = atomic_load_explicit(&e->cb_ref, memory_order_acquire);
	if (atomic_load_explicit(&e->running, memory_order_acquire) != t)
		return 0;
	return tmo__wait_begin(ref) != 0 ? TMO_EDEADLK : 1;
}

/* A cancel that prevented an arm its own callback made (a re-arm, filed by
 * the timer thread) returns only after that callback returned [3]: `run`,
 * from check_running.  The wait was checked there, and the running
 * invocation cannot change meanwhile (the arm it would fire is the one
 * prevented): it waits unchecked. */
static int prevented_return(struct tmo *e, struct tmo_timer *t, int run)
{
	if (LF_UNLIKELY(run))
		wait_running(e, t, false);
	return TMO_CANCEL_PREVENTED;
}

/* A filed arm was prevented (CANCEL_PENDING, ours): take it out of our own
 * base if we can have its lock at once; any other base's holder (its owner,
 * or the timer thread at its next look) removes and frees it from the
 * base's cancel stack.  Never trylock another thread's base: its lock line
 * would travel between the two cores on every cross-thread cancel. */
static void unfile(struct tmo *e, struct lf_node *n, struct lf_rec *r)
{
	uintptr_t aux = atomic_load_explicit(&n->aux, memory_order_relaxed);
	struct lf_base *b = (aux & 3u) == LF_IN_THREAD ? (struct lf_base *)(aux & ~(uintptr_t)3)
	                                                : e->tt_base;
	if (r != NULL && r->base == b && lf_base_own_trylock(e, b)) {
		LF_HOOK(owner_in, e);
		const struct lf_sched *sc = e->p->sched;
		if (sc->contains(n))
			sc->remove(lf_sched_of(b), n);
		/* else the timer thread collected it as due: its CAS to FIRING
		 * fails on our state, and it never frees a node it did not fire */
		lf_base_own_unlock(b);
		lf_cache_put(e, r, n);
		return;
	}
	ck_stack_push_upmc(&b->cancels, &n->link);
	/* the holder frees it; make sure one comes soon (no retention): a timer
	 * thread that sleeps no longer than it would while arms keep coming
	 * (timer.c, Lazy) is not woken.  Woken at once, it stole the arm the
	 * canceller had in its ring by then, whose cancel woke it again. */
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		tmo__lf_wake_for(e, atomic_load_explicit(&e->tick_at, memory_order_relaxed) +
		                        lf_lazy_ns(e));
}

static void ring_take_back(struct tmo *e, uint64_t w, struct lf_node *n);

static int cancel_loop(struct tmo *e, struct tmo_timer *t, uint64_t w)
{
	_Atomic uint64_t *word = lf_timer_word(t);
	int waited = 0;
	for (;; w = atomic_load_explicit(word, memory_order_acquire)) {
		unsigned out = lf_word_out(w);
		if (out == LF_NONE)
			return TMO_ENOTARMED;
		if (out == LF_CANCELLED_OUT)
			return waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;
		struct lf_node *n = lf_node_at(e, lf_word_idx(w));
		uint64_t gen = lf_word_gen(w);
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		/* A node that moved on (reused) was resolved, and its outcome is in
		 * the word by then: FIRED ends below, anything else is re-read.  A
		 * word that still names an arm its node no longer has was copied
		 * or corrupted by the caller: refuse, never spin. */
		unsigned st = lf_gen_of(s) == gen ? lf_st_of(s) : LF_FREE;
		if (st == LF_FREE && out == LF_PENDING) {
			if (atomic_load_explicit(word, memory_order_acquire) == w)
				return TMO_ENOTARMED;
			continue;
		}
		uint64_t cancelled = (w & ~(uint64_t)3) | LF_CANCELLED_OUT;
		if (out == LF_PENDING) {
			if (st == LF_RING || st == LF_QUEUED) {
				unsigned to = st == LF_RING ? LF_CANCELLED : LF_DROPPED;
				if (!atomic_compare_exchange_strong_explicit(&n->state, &s,
				                                             lf_st(gen, to),
				                                             memory_order_acq_rel,
				                                             memory_order_acquire))
					continue;
				atomic_store_explicit(word, cancelled, memory_order_release);
				count_prevented(e);
				if (st == LF_RING)
					ring_take_back(e, w, n);
				/* QUEUED: whoever holds it in transit drops it */
				return TMO_CANCEL_PREVENTED;
			}
			if (st == LF_IN_STRUCT) {
				int run = check_running(e, t); /* before preventing */
				if (run < 0)
					return run;
				if (!atomic_compare_exchange_strong_explicit(
				        &n->state, &s, lf_st(gen, LF_CANCEL_PENDING),
				        memory_order_acq_rel, memory_order_acquire))
					continue;
				atomic_store_explicit(word, cancelled, memory_order_release);
				count_prevented(e);
				unfile(e, n, lf_rec_get(e));
				return prevented_return(e, t, run);
			}
			if (st == LF_CANCELLED || st == LF_CANCEL_PENDING || st == LF_DROPPED)
				return TMO_ENOTARMED; /* a concurrent cancel won */
		}
		if (st == LF_FIRING) {
			int rc = wait_firing(e, n, gen); /* SELF, TMO_EDEADLK or 0: waited */
			if (rc != 0)
				return rc;
			waited = 1;
			continue; /* the callback may have re-armed the timer */
		}
		if (out != LF_FIRED)
			continue;
		/* Fired and returned.  A re-arm from inside that callback stores
		 * its word before the callback returns, and the timer thread
		 * clears `running` after: seeing `running` != t first, then the
		 * word unchanged, means there was no re-arm. */
		if (atomic_load_explicit(&e->running, memory_order_acquire) == t) {
			if (tmo__thread_engine == e)
				return TMO_CANCEL_SELF;
			if (wait_running(e, t, true) != 0)
				return TMO_EDEADLK;
			waited = 1;
			continue;
		}
		if (atomic_load_explicit(word, memory_order_acquire) != w)
			continue;
		return waited ? TMO_CANCEL_WAITED : TMO_CANCEL_FIRED;
	}
}

static __attribute__((noinline)) int cancel_slow(struct tmo *e, struct tmo_timer *t,
                                                 uint64_t w)
{
	int rc = cancel_loop(e, t, w);
	tmo__wait_end(); /* whatever a wait published (none: a TLS test) */
	return rc;
}

/* The slot of our ring that holds arm w, or -1: the last arm's slot first
 * (the seed's arm+cancel, nested scopes), then the others. */
static inline int ring_find(const struct lf_rec *r, uint64_t w)
{
	uint32_t k = (uint32_t)(atomic_load_explicit(&r->head, memory_order_relaxed) - 1) &
	             (LF_RING_SLOTS - 1);
	if (atomic_load_explicit(&r->ring[k], memory_order_relaxed) == w)
		return (int)k;
	for (k = 0; k < LF_RING_SLOTS; k++)
		if (atomic_load_explicit(&r->ring[k], memory_order_relaxed) == w)
			return (int)k;
	return -1;
}

/* A ring arm w (node n) this thread just won (CANCELLED): if the ring is
 * ours, the node comes back at once; else its owner reclaims it from its
 * slot when it passes there again. */
static void ring_take_back(struct tmo *e, uint64_t w, struct lf_node *n)
{
	struct lf_rec *r = lf_rec_get(e);
	int k = r != NULL ? ring_find(r, w) : -1;
	if (k < 0)
		return;
	atomic_store_explicit(&r->ring[k], 0, memory_order_relaxed);
	lf_cache_put(e, r, n);
}

/* The arm w of this thread's hot record r is not its ring's last: most
 * often it outlived the ring and was filed (IN_STRUCT, in r's own base).
 * Dispatched on its state, read first: a CAS that expects RING would fail
 * here on every such cancel. */
static __attribute__((noinline)) int cancel_filed(struct tmo *e, struct tmo_timer *t, uint64_t w,
                                                  struct lf_rec *r)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t s = lf_st(lf_word_gen(w), LF_IN_STRUCT);
	/* t's own callback still running (it made this arm, a re-arm): the
	 * slow path checks and waits.  Not running now, it has returned: its
	 * `running` store precedes its arm's word store, read with acquire. */
	if (atomic_load_explicit(&n->state, memory_order_relaxed) != s ||
	    LF_UNLIKELY(atomic_load_explicit(&e->running, memory_order_acquire) == t) ||
	    !atomic_compare_exchange_strong_explicit(&n->state, &s, s + (LF_CANCEL_PENDING -
	                                                                 LF_IN_STRUCT),
	                                             memory_order_acq_rel, memory_order_relaxed))
		return cancel_slow(e, t, w);
	atomic_store_explicit(lf_timer_word(t), (w & ~(uint64_t)3) | LF_CANCELLED_OUT,
	                      memory_order_release);
	lf_bump(&r->prevented);
	struct lf_base *b = r->base;
	if (atomic_load_explicit(&n->aux, memory_order_relaxed) == ((uintptr_t)b | LF_IN_THREAD) &&
	    b != NULL && lf_base_own_trylock(e, b)) {
		/* in our own base (unfile's case, without its look-ups) */
		LF_HOOK(owner_in, e);
		if (tmo__wheel_contains(&n->s.wheel))
			tmo__wheel_del(lf_own_wheel(b), &n->s.wheel);
		bool emptied = tmo__wheel_count(lf_own_wheel(b)) == 0;
		lf_base_own_unlock(b);
		if (LF_UNLIKELY(emptied))
			tmo__lf_cache_idle(e, r, n);
		else
			lf_cache_put(e, r, n);
	} else {
		unfile(e, n, r);
	}
	return TMO_CANCEL_PREVENTED;
}

/* The fast path: the arm is still in a ring, and it is the last arm of
 * this thread's hot record. */
int tmo__lf_cancel(struct tmo *e, struct tmo_timer *t)
{
	_Atomic uint64_t *word = lf_timer_word(t);
	uint64_t w = atomic_load_explicit(word, memory_order_acquire);
	if (LF_UNLIKELY(lf_word_out(w) != LF_PENDING || tmo__lf_tls_hot.id != e->base.id))
		return cancel_slow(e, t, w);
	struct lf_rec *r = tmo__lf_tls_hot.rec;
	uint32_t k = (uint32_t)(atomic_load_explicit(&r->head, memory_order_relaxed) - 1) &
	             (LF_RING_SLOTS - 1);
	if (atomic_load_explicit(&r->ring[k], memory_order_relaxed) != w)
		return cancel_filed(e, t, w, r);
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	/* the arm's RING state is its word without the index */
	uint64_t s = w & ~((uint64_t)((1u << LF_IDX_BITS) - 1) << 2);
	if (LF_UNLIKELY(!atomic_compare_exchange_strong_explicit(&n->state, &s,
	                                                         s + (LF_CANCELLED - LF_RING),
	                                                         memory_order_acq_rel,
	                                                         memory_order_relaxed)))
		return cancel_slow(e, t, w); /* stolen, or another thread's cancel won */
	/* won: taken back before anyone else looked; from our own ring: it
	 * never left this thread.  Its node goes back to the cache it came
	 * from unchecked: the cache is at most LF_CACHE_MAX after any other
	 * path, and only the arms still in the ring come back this way, so it
	 * never exceeds LF_CACHE_MAX + LF_RING_SLOTS. */
	atomic_store_explicit(word, w | LF_CANCELLED_OUT, memory_order_release);
	atomic_store_explicit(&r->ring[k], 0, memory_order_relaxed);
	lf_bump(&r->prevented);
	n->free_next = r->cache;
	r->cache = n;
	r->cache_n++;
	return TMO_CANCEL_PREVENTED;
}
