/*
 * arm: what the application's threads run to arm a timer, and the filing
 * a holder of a base does (lf.h has the design; cancel.c takes arms back,
 * rec.c keeps the records).
 *
 * Ordering on the fast path (one arm, its cancel by the same thread):
 *   arm:    node fields; state = RING|g (release); timer word (release);
 *           ring slot (release); compiler barrier (or a fence, see clock.c);
 *           tick word: is the timer thread asleep?
 *   cancel: timer word (acquire); CAS state RING|g -> CANCELLED|g; timer
 *           word = CANCELLED; clear the slot; the node back to the cache.
 * The timer thread steals with the same CAS (RING -> QUEUED), so exactly
 * one of them wins; every field it then reads was published by the release
 * store of the state word it CASed.
 */
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "clock.h"
#include "pool.h"
#include "depot.h"
#include "base.h"
#include "rec.h"
#include "arm.h"
#include "hook.h"

/* ---- arm -------------------------------------------------------------------------- */

/* The timer thread's own arm (from a callback): filed at once. */
int tmo__lf_arm_on_timer(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                         void *arg)
{
	struct lf_rec *r = e->tt_rec;
	int err = TMO_ENOMEM;
	struct lf_node *n = r->cache;
	if (n == NULL && (n = tmo__lf_cache_refill(e, r, &err)) == NULL)
		return err;
	r->cache = n->free_next;
	r->cache_n--;
	uint64_t gen = (lf_gen_of(atomic_load_explicit(&n->state, memory_order_relaxed)) + 1) &
	               LF_GEN_MASK;
	n->timer = t;
	t->cb = cb;
	t->arg = arg;
	atomic_store_explicit(&n->aux, LF_IN_TT, memory_order_relaxed);
	if (e->p->sched->insert(lf_sched_of(e->tt_base), n, tmo_now_ns() + timeout_ns) != 0) {
		lf_cache_put(e, r, n);
		return TMO_ENOMEM;
	}
	atomic_store_explicit(&n->state, lf_st(gen, LF_IN_STRUCT), memory_order_release);
	atomic_store_explicit(lf_timer_word(t), lf_word(lf_idx_of(e, n), gen, LF_PENDING),
	                      memory_order_release);
	lf_bump(&r->head);
	return 0;
}

static int arm_bare(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                    void *arg)
{
	int err = TMO_ENOMEM;
	struct lf_node *n = tmo__lf_alloc_bare(e, &err);
	if (n == NULL)
		return err;
	uint64_t gen = (lf_gen_of(atomic_load_explicit(&n->state, memory_order_relaxed)) + 1) &
	               LF_GEN_MASK;
	n->timer = t;
	atomic_store_explicit(&n->s.q.timeout, tmo_now_ns() + timeout_ns, memory_order_relaxed);
	atomic_store_explicit(&n->s.q.stamp, LF_STAMP_DEADLINE, memory_order_relaxed);
	t->cb = cb;
	t->arg = arg;
	atomic_store_explicit(&n->state, lf_st(gen, LF_QUEUED), memory_order_release);
	atomic_store_explicit(lf_timer_word(t), lf_word(lf_idx_of(e, n), gen, LF_PENDING),
	                      memory_order_release);
	atomic_fetch_add_explicit(&e->armed_bare, 1, memory_order_relaxed);
	tmo__lf_inbox_post(e, n);
	return 0;
}

static __attribute__((noinline)) int arm_slow(struct tmo *e, struct tmo_timer *t,
                                              int64_t timeout_ns, tmo_callback *cb, void *arg)
{
	if (tmo__thread_engine == e)
		return tmo__lf_arm_on_timer(e, t, timeout_ns, cb, arg);
	return arm_bare(e, t, timeout_ns, cb, arg);
}

/* From the values arm stored: once published, the node may be stolen
 * and filed, and its fields rewritten.  Returns 0 (arm's result). */
static __attribute__((noinline)) int arm_wake(struct tmo *e, uint64_t stamp, int64_t timeout_ns)
{
	tmo__lf_wake_for(e, tmo__lf_node_deadline_lower(e, stamp, timeout_ns));
	return 0;
}

/* Fill n for its next arm, of t in slot i of r, and publish it. */
static inline void arm_fill(struct lf_rec *r, struct lf_node *n, struct tmo_timer *t,
                            int64_t timeout_ns, uint64_t stamp, tmo_callback *cb, void *arg)
{
	n->timer = t;
	atomic_store_explicit(&n->s.q.timeout, timeout_ns, memory_order_relaxed);
	atomic_store_explicit(&n->s.q.stamp, stamp, memory_order_relaxed);
	t->cb = cb;
	t->arg = arg;
	atomic_store_explicit(&n->aux, (uintptr_t)r->base | LF_IN_THREAD, memory_order_relaxed);
}
static inline void arm_publish_filled(struct tmo *e, struct lf_rec *r, struct lf_node *n,
                                      uint32_t i, struct tmo_timer *t)
{
	uint64_t st = lf_next_ring(atomic_load_explicit(&n->state, memory_order_relaxed));
	uint64_t w = lf_word(lf_idx_of(e, n), lf_gen_of(st), LF_PENDING);
	/* the timer's word before the slot: once in the slot the arm may be
	 * stolen and fire, and fire writes FIRED over it */
	atomic_store_explicit(&n->state, st, memory_order_release);
	atomic_store_explicit(lf_timer_word(t), w, memory_order_release);
	atomic_store_explicit(&r->ring[i], w, memory_order_release);
	lf_bump(&r->head);
}
static inline void arm_publish(struct tmo *e, struct lf_rec *r, struct lf_node *n, uint32_t i,
                               struct tmo_timer *t, int64_t timeout_ns, uint64_t stamp,
                               tmo_callback *cb, void *arg)
{
	arm_fill(r, n, t, timeout_ns, stamp, cb, arg);
	arm_publish_filled(e, r, n, i, t);
}

/* mpsc: the inbox holds more than INBOX_MAX nodes its timer thread has
 * not taken (the wheel files in its own base: never full). */
static inline int inbox_full(struct tmo *e, const struct lf_rec *r)
{
	return r->base == NULL && atomic_load_explicit(&e->inbox_in, memory_order_relaxed) -
	                                  atomic_load_explicit(&e->inbox_out, memory_order_relaxed) >
	                              INBOX_MAX;
}

/* The ring arm w leaves for our own base r->base = b: the common case of
 * tmo__lf_ring_evict (base.c: file_from_ring, then tmo__lf_base_release) fused into
 * arm_spill, every rarer case handed to tmo__lf_ring_evict whole.  One CAS RING
 * -> IN_STRUCT, no transit: its aux already names the base (arm wrote it),
 * and until it is in the wheel only we hold the base.  The stamp is
 * converted inline (cal.h), near the latest pair; farther, clock.c caps
 * it.  Returns when the base wants the timer thread to look (0: at once),
 * for the arm's own look at the tick word: one look for both. */
static inline __attribute__((always_inline)) int64_t spill_own(struct tmo *e, struct lf_rec *r,
                                                               struct lf_base *b, uint64_t w)
{
	if (LF_UNLIKELY(!lf_base_own_trylock(e, b))) {
		tmo__lf_ring_evict(e, r, w); /* the long way: the tofile stack */
		return INT64_MAX;
	}
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	/* the arm's RING state is its word without the index */
	uint64_t s = w & ~((uint64_t)((1u << LF_IDX_BITS) - 1) << 2);
	/* announced before the CAS (timer.c, Order); unknown (1) until the
	 * insert is done */
	atomic_store_explicit(&r->transit, 1, memory_order_relaxed);
	if (LF_UNLIKELY(!atomic_compare_exchange_strong_explicit(
	        &n->state, &s, s + (LF_IN_STRUCT - LF_RING), memory_order_acq_rel,
	        memory_order_acquire))) {
		lf_base_own_unlock(b);
		atomic_store_explicit(&r->transit, 0, memory_order_release);
		if (s == lf_st(lf_word_gen(w), LF_CANCELLED)) /* another thread's cancel */
			lf_cache_put(e, r, n);
		return INT64_MAX; /* else the timer thread stole it */
	}
	LF_HOOK(transit, e);
	/* we own the fields until the insert */
	int64_t deadline = tmo__lf_node_deadline_own(e, r, n);
	int64_t next = atomic_load_explicit(&b->next, memory_order_relaxed);
	if (deadline < next) {
		next = deadline;
		atomic_store_explicit(&b->next, deadline, memory_order_release);
	}
	tmo__wheel_add(lf_own_wheel(b), &n->s.wheel, deadline);
	lf_bump(&r->spilled);
	int64_t wake_at;
	/* tmo__lf_base_release's common case: nothing to tidy, nothing due soon */
	if (LF_UNLIKELY(ck_pr_load_ptr(&b->cancels.head) != NULL ||
	                ck_pr_load_ptr(&b->tofile.head) != NULL ||
	                next <= atomic_load_explicit(&e->tick_at, memory_order_relaxed) + LF_SOON_NS ||
	                atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)) {
		wake_at = tmo__lf_base_release(e, b, r);
	} else {
		lf_base_own_unlock(b);
		wake_at = next;
	}
	atomic_store_explicit(&r->transit, 0, memory_order_release);
	return wake_at;
}

/* The ring arm w leaves for the inbox (mpsc): tmo__lf_ring_evict's inbox case
 * (base.c) with tmo__lf_inbox_post's push fused into arm_spill.  Returns a
 * lower bound on its deadline (0: unknown) for the arm's own look at the
 * tick word, or INT64_MAX when it was no longer in the ring. */
static inline __attribute__((always_inline)) int64_t spill_inbox(struct tmo *e,
                                                                 struct lf_rec *r, uint64_t w)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t s = w & ~((uint64_t)((1u << LF_IDX_BITS) - 1) << 2);
	/* announced before the CAS (timer.c, Order): 1, unknown, until its
	 * bound is known */
	atomic_store_explicit(&r->transit, 1, memory_order_relaxed);
	if (LF_UNLIKELY(!atomic_compare_exchange_strong_explicit(
	        &n->state, &s, s + (LF_QUEUED - LF_RING), memory_order_acq_rel,
	        memory_order_acquire))) {
		atomic_store_explicit(&r->transit, 0, memory_order_release);
		if (s == lf_st(lf_word_gen(w), LF_CANCELLED)) /* another thread's cancel */
			lf_cache_put(e, r, n);
		return INT64_MAX; /* else the timer thread stole it */
	}
	/* read before the push: once in the inbox it may be filed, and these
	 * fields written over */
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	int64_t timeout = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
	int64_t lower = timeout;
	if (stamp != LF_STAMP_DEADLINE) {
		/* near the latest pair the arm lies within a floor either side
		 * of the conversion: its upper bound less two floors */
		int64_t hi = lf_cal_near(&e->cal, stamp, e->margin_ns);
		lower = LF_LIKELY(hi != 0) ? hi - 2 * e->margin_ns + timeout
		                           : tmo__lf_node_deadline_lower(e, stamp, timeout);
	}
	if (lower > 0)
		atomic_store_explicit(&r->transit, lower, memory_order_relaxed);
	else
		lower = 0;
	LF_HOOK(transit, e);
	lf_bump(&r->spilled);
	ck_stack_push_upmc(&e->inbox, &n->link);
	atomic_fetch_add_explicit(&e->inbox_in, 1, memory_order_relaxed);
	atomic_store_explicit(&r->transit, 0, memory_order_release);
	return lower;
}

/* arm's look found the timer thread asleep: wake it for this arm, or for
 * `wake_at` (a base's, 0: at once) if earlier.  Returns 0 (arm's
 * result). */
static __attribute__((noinline)) int arm_wake_at(struct tmo *e, uint64_t stamp, int64_t timeout_ns,
                                                 int64_t wake_at)
{
	int64_t lower = tmo__lf_node_deadline_lower(e, stamp, timeout_ns);
	/* past INBOX_WAKE nodes in the inbox it wakes whatever the deadlines
	 * (tmo__lf_inbox_post) */
	if (!e->p->thread_bases && atomic_load_explicit(&e->inbox_in, memory_order_relaxed) -
	                                   atomic_load_explicit(&e->inbox_out,
	                                                        memory_order_relaxed) >=
	                               INBOX_WAKE)
		wake_at = 0;
	tmo__lf_wake_for(e, wake_at < lower ? wake_at : lower);
	return 0;
}

/* The fast path's arm whose ring slot still holds an arm: a timer that
 * outlived the ring (held timers).  The slot's arm goes to our base (or
 * the inbox), then this one takes its place, dated by the fast path's
 * stamp; one look at the tick word serves both. */
static __attribute__((noinline)) int arm_spill(struct tmo *e, struct tmo_timer *t,
                                               int64_t timeout_ns, tmo_callback *cb, void *arg,
                                               uint64_t stamp)
{
	struct lf_rec *r = tmo__lf_tls_hot.rec;
	struct lf_base *b = r->base;
	uint32_t i = (uint32_t)atomic_load_explicit(&r->head, memory_order_relaxed) &
	             (LF_RING_SLOTS - 1);
	uint64_t prev = atomic_load_explicit(&r->ring[i], memory_order_relaxed);
	if (LF_UNLIKELY(inbox_full(e, r))) {
		tmo__lf_ec_wake(&e->wake_ec); /* whatever it sleeps for: drain */
		return TMO_EAGAIN;
	}
	/* This arm's node is filled first (ours until published): fewer
	 * values live across the filing. */
	struct lf_node *n = r->cache; /* the fast path saw one */
	r->cache = n->free_next;
	r->cache_n--;
	arm_fill(r, n, t, timeout_ns, stamp, cb, arg);
	int64_t wake_at = INT64_MAX;
	if (b != NULL)
		wake_at = spill_own(e, r, b, prev);
	else
		wake_at = spill_inbox(e, r, prev);
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	arm_publish_filled(e, r, n, i, t);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		return arm_wake_at(e, stamp, timeout_ns, wake_at);
	return 0;
}

/* Every arm the fast path below does not take: a new record, an empty
 * cache, a slot still in use, no TSC, fences, a timer still armed, the
 * timer thread or a thread whose exit hook ran.  `stamp`: the fast path's
 * (one stamp an arm), or 0: read one here. */
static __attribute__((noinline)) int arm_general(struct tmo *e, struct tmo_timer *t,
                                                 int64_t timeout_ns, tmo_callback *cb, void *arg,
                                                 uint64_t stamp)
{
	if (LF_UNLIKELY(lf_word_out(atomic_load_explicit(lf_timer_word(t), memory_order_relaxed)) ==
	                LF_PENDING))
		return TMO_EARMED;
	struct lf_rec *r = lf_rec_get(e);
	if (LF_UNLIKELY(r == NULL))
		return arm_slow(e, t, timeout_ns, cb, arg);
	struct lf_node *n = r->cache;
	if (n == NULL) {
		int err = TMO_ENOMEM;
		if ((n = tmo__lf_cache_refill(e, r, &err)) == NULL)
			return err;
	}
	r->cache = n->free_next;
	r->cache_n--;
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (stamp == 0)
		stamp = lf_stamp();
	if (!lf_stamp_fresh(e, stamp)) { /* the calibration is old (clock.c, Dating) */
		stamp = LF_STAMP_DEADLINE;
		timeout_ns += tmo_now_ns();
	}
	uint32_t i = (uint32_t)atomic_load_explicit(&r->head, memory_order_relaxed) &
	             (LF_RING_SLOTS - 1);
	uint64_t prev = atomic_load_explicit(&r->ring[i], memory_order_relaxed);
	if (prev != 0) {
		/* Flow control without waiting: the slot's arm would go to the
		 * timer thread through the inbox while that thread is already
		 * INBOX_MAX nodes behind; refuse this arm instead. */
		if (inbox_full(e, r)) {
			lf_cache_put(e, r, n);
			tmo__lf_ec_wake(&e->wake_ec); /* whatever it sleeps for: drain */
			return TMO_EAGAIN;
		}
		tmo__lf_ring_evict(e, r, prev);
	}
	arm_publish(e, r, n, i, t, timeout_ns, stamp, cb, arg);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		return arm_wake(e, stamp, timeout_ns);
	return 0;
}

/* The fast path: this thread's record is the hot one, its cache has a node,
 * the next slot is free, the timer thread is awake, no fence is needed and
 * the TSC dates arms (the calibration is fresh).  Nothing here calls a
 * function but in tail position, and stores are ordered so that few values
 * stay live: it needs few registers saved. */
static inline __attribute__((always_inline)) int arm_fast(struct tmo *e, struct tmo_timer *t,
                                                          int64_t timeout_ns, tmo_callback *cb,
                                                          void *arg)
{
	struct lf_rec *r = tmo__lf_tls_hot.rec;
	struct lf_node *n = r->cache;
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	_Atomic uint64_t *slot = &r->ring[head & (LF_RING_SLOTS - 1)];
	_Atomic uint64_t *word = lf_timer_word(t);
	uint64_t stamp = lf_tsc();
	if (LF_UNLIKELY(n == NULL ||
	                lf_word_out(atomic_load_explicit(word, memory_order_relaxed)) == LF_PENDING ||
	                stamp > atomic_load_explicit(&e->fresh_until, memory_order_acquire)))
		return arm_general(e, t, timeout_ns, cb, arg, stamp);
	if (atomic_load_explicit(slot, memory_order_relaxed) != 0)
		return arm_spill(e, t, timeout_ns, cb, arg, stamp);
	t->cb = cb;
	t->arg = arg;
	r->cache = n->free_next;
	r->cache_n--;
	n->timer = t;
	atomic_store_explicit(&n->s.q.timeout, timeout_ns, memory_order_relaxed);
	atomic_store_explicit(&n->s.q.stamp, stamp, memory_order_relaxed);
	uint64_t st = lf_next_ring(atomic_load_explicit(&n->state, memory_order_relaxed));
	/* lf_word(index, generation, LF_PENDING): index << 2 is the offset >> 4 */
	uint64_t w = st + ((uint64_t)((char *)n - e->pool.arena) >> 4);
	/* the base a filing from the ring puts it in (mpsc: none) */
	atomic_store_explicit(&n->aux, (uintptr_t)r->base | LF_IN_THREAD, memory_order_relaxed);
	/* the timer's word before the slot: once in the slot the arm may be
	 * stolen and fire, and fire writes FIRED over it */
	atomic_store_explicit(&n->state, st, memory_order_release);
	atomic_store_explicit(word, w, memory_order_release);
	atomic_store_explicit(slot, w, memory_order_release);
	atomic_store_explicit(&r->head, head + 1, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst); /* see clock.c: membarrier */
	if (LF_UNLIKELY(atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING))
		return arm_wake(e, stamp, timeout_ns);
	return 0;
}

/* mpsc's and the wheel's arm. */
int tmo__lf_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb, void *arg)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (LF_UNLIKELY(tmo__lf_tls_hot.id != e->base.id || (tw & (LF_TW_SLEEPING | LF_TW_FENCE)) != 0 ||
	                !tmo__lf_use_tsc))
		return arm_general(e, t, timeout_ns, cb, arg, 0);
	return arm_fast(e, t, timeout_ns, cb, arg);
}
