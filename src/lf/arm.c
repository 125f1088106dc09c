/*
 * arm: what the application's threads run to arm a timer, and the filing
 * a holder of a base does (lf.h has the design; cancel.c takes arms back,
 * rec.c keeps the records).
 *
 * Ordering on the fast path (one arm, its cancel by the same thread):
 *   arm:    node fields; state = RING|g (release); timer word (release);
 *           ring slot (release); compiler barrier (or a fence, see ec.c);
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

/* Announced in r (timer.c, Order) before an arm reads its stamp, cleared
 * once it is in its slot or filed: a lower bound on its deadline (the
 * latest tick's clock read is before the stamp), so that a round that
 * begins meanwhile fires nothing due at or after it.  Without it an
 * owner preempted between its stamp and its slot store, or mid-filing,
 * let rounds fire timers due after the arm it held: expiry at 1e6 beside
 * four hogs, the wheel, 2 order violations (deadlines 1.002 and 1.018 ms
 * apart) in 1 run of 4 before (issue 19). */
static inline void arm_announce_at(struct lf_rec *r, int64_t lower)
{
	atomic_store_explicit(&r->transit, lower > 0 ? lower : 1, memory_order_relaxed);
}
static inline void arm_announce(struct tmo *e, struct lf_rec *r, int64_t timeout_ns)
{
	arm_announce_at(r, atomic_load_explicit(&e->tick_at, memory_order_relaxed) + timeout_ns);
}

/* The arm is in its slot or filed (after its release stores). */
static inline void arm_unannounce(struct lf_rec *r)
{
	atomic_store_explicit(&r->transit, 0, memory_order_release);
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

/* An arm filed at once, in state `to` (LF_QUEUED or LF_IN_STRUCT, both past
 * LF_RING): its node's next generation, then the timer's word; counted as
 * an arm. */
static inline void publish_at_once(struct tmo *e, struct lf_rec *r, struct lf_node *n,
                                   struct tmo_timer *t, unsigned to)
{
	uint64_t st = lf_next_ring(atomic_load_explicit(&n->state, memory_order_relaxed)) +
	              (to - LF_RING);
	atomic_store_explicit(&n->state, st, memory_order_release);
	atomic_store_explicit(lf_timer_word(t), lf_word(lf_idx_of(e, n), lf_gen_of(st), LF_PENDING),
	                      memory_order_release);
	lf_bump(&r->head);
	lf_bump(&r->direct);
}

/* The fast path's arm whose ring slot still holds a live arm: a timer that
 * outlived the ring (held timers).  This arm is filed at once, in our own
 * base (or the inbox): nobody knows its node yet, so its state is stored,
 * not CASed; it stays announced in transit (arm_announce) until filed.
 * Evicting the slot's arm instead costs a CAS on it (the timer
 * thread and other threads' cancels race for a ring arm), and a slot's arm
 * that lived through a whole pass of the ring is most often one that lives
 * on.  The slot keeps it until it is cancelled or stolen; the next arm
 * looks at the next slot.  `timeout`: the one arm_fill stored in n.
 * Returns 0 when the base was busy (nothing done), else 1 and *wake_at:
 * when the base wants the timer thread to look (0: at once). */
static inline __attribute__((always_inline)) int file_own(struct tmo *e, struct lf_rec *r,
                                                          struct lf_base *b, struct lf_node *n,
                                                          struct tmo_timer *t, int64_t timeout,
                                                          int64_t *wake_at)
{
	if (LF_UNLIKELY(!lf_base_own_trylock(e, b)))
		return 0;
	/* from the fields arm_fill stored; the insert writes over them */
	int64_t deadline = tmo__lf_node_deadline_own(e, r, n);
	int64_t next = atomic_load_explicit(&b->next, memory_order_relaxed);
	if (deadline < next) {
		next = deadline;
		atomic_store_explicit(&b->next, deadline, memory_order_release);
	}
	/* Placed from a time at hand, this owner's last filed arm's or the
	 * latest tick's, whichever is later (a sleeping timer thread leaves
	 * the tick behind), plus the timeout: the wheel's writes do not wait
	 * for the stamp's TSC read and conversion (wheel.h).  The tick's
	 * alone placed 16.8 % of the harness's held arms again. */
	int64_t at = atomic_load_explicit(&e->tick_at, memory_order_relaxed);
	if (r->held_at > at)
		at = r->held_at;
	tmo__wheel_add_near(lf_own_wheel(b), &n->s.wheel, deadline, at + timeout);
	r->held_at = deadline - timeout;
	/* before the unlock: the timer thread sees the node only through the
	 * base, a canceller only through the word */
	publish_at_once(e, r, n, t, LF_IN_STRUCT);
	/* tmo__lf_base_release's common case: nothing to tidy, nothing due soon */
	if (LF_UNLIKELY(ck_pr_load_ptr(&b->cancels.head) != NULL ||
	                ck_pr_load_ptr(&b->tofile.head) != NULL ||
	                next <= atomic_load_explicit(&e->tick_at, memory_order_relaxed) + LF_SOON_NS ||
	                atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)) {
		*wake_at = tmo__lf_base_release(e, b, r);
	} else {
		lf_base_own_unlock(b);
		*wake_at = next;
	}
	return 1;
}

/* file_own's inbox case (mpsc): the node goes QUEUED into the inbox, its
 * state stored, not CASed.  Its deadline is not worked out here: the
 * arm's look at the tick word has its announcement, and converts the
 * stamp only when the timer thread sleeps (arm_asleep, arm_wake_at). */
static inline __attribute__((always_inline)) void file_inbox(struct tmo *e, struct lf_rec *r,
                                                             struct lf_node *n,
                                                             struct tmo_timer *t)
{
	/* the word before the push: once in the inbox it may fire */
	publish_at_once(e, r, n, t, LF_QUEUED);
	ck_stack_push_upmc(&e->inbox, &n->link);
	atomic_fetch_add_explicit(&e->inbox_in, 1, memory_order_relaxed);
}

/* mpsc: the inbox holds INBOX_WAKE nodes or more its timer thread has not
 * taken: an asleep thread is woken whatever the deadlines
 * (tmo__lf_inbox_post). */
static inline int inbox_wakes(const struct tmo *e)
{
	return !e->p->thread_bases && atomic_load_explicit(&e->inbox_in, memory_order_relaxed) -
	                                      atomic_load_explicit(&e->inbox_out,
	                                                           memory_order_relaxed) >=
	                                  INBOX_WAKE;
}

/* arm's look found the timer thread asleep: wake it for this arm, or for
 * `wake_at` (a base's, 0: at once) if earlier.  Returns 0 (arm's
 * result). */
static __attribute__((noinline)) int arm_wake_at(struct tmo *e, uint64_t stamp, int64_t timeout_ns,
                                                 int64_t wake_at)
{
	int64_t lower = tmo__lf_node_deadline_lower(e, stamp, timeout_ns);
	if (inbox_wakes(e))
		wake_at = 0;
	tmo__lf_wake_for(e, wake_at < lower ? wake_at : lower);
	return 0;
}

/* The fast path's arm (in its slot, or filed at once: arm_spill) found the
 * timer thread asleep (timer.c, Lazy): it wakes it when due before its
 * wake-up, `wake_at` as for arm_wake_at.  The common case is worked out
 * from the arm's announcement, still up (the latest tick's time plus its
 * timeout: a lower bound on its deadline), with no conversion: the arms of
 * a stream of far timeouts go the fast way and wake nothing while the
 * thread sleeps.  Returns 0 (arm's result). */
static __attribute__((noinline)) int arm_asleep(struct tmo *e, struct lf_rec *r, uint64_t stamp,
                                                int64_t timeout_ns, int64_t wake_at)
{
	int64_t lower = atomic_load_explicit(&r->transit, memory_order_relaxed);
	arm_unannounce(r);
	atomic_thread_fence(memory_order_acquire); /* sleep_until is stored before SLEEPING */
	int64_t until = atomic_load_explicit(&e->sleep_until, memory_order_relaxed);
	if (lower >= until && wake_at >= until && !inbox_wakes(e))
		return 0; /* it wakes by itself in time */
	return arm_wake_at(e, stamp, timeout_ns, wake_at);
}

/* The fast path's arm whose ring slot is not free.  Its arm still in the
 * ring (its RING state): this arm is filed at once (file_own, file_inbox).
 * Else the slot is stale: the timer thread stole its arm (the node is its
 * own now), or another thread's cancel took it back and left the node for
 * us to reclaim; this arm takes the slot.  One look at the tick word. */
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
		arm_unannounce(r);
		tmo__lf_ec_wake(&e->wake_ec); /* whatever it sleeps for: drain */
		return TMO_EAGAIN;
	}
	/* This arm's node is filled first (ours until published). */
	struct lf_node *n = r->cache; /* the fast path saw one */
	r->cache = n->free_next;
	r->cache_n--;
	/* the next arm's node, while this one files: a chain fresh from the
	 * depot is lines other threads freed (depot.c, refill) */
	__builtin_prefetch(r->cache, 1);
	arm_fill(r, n, t, timeout_ns, stamp, cb, arg);
	/* the fast path announced this arm (arm_announce): in our hands until
	 * filed or in its slot */
	struct lf_node *old = lf_node_at(e, lf_word_idx(prev));
	/* the slot's arm's RING state is its word without the index */
	uint64_t ring_st = prev & ~((uint64_t)((1u << LF_IDX_BITS) - 1) << 2);
	/* acquire: a cancel's CANCELLED, and what it did before, seen here */
	uint64_t s = atomic_load_explicit(&old->state, memory_order_acquire);
	int64_t wake_at = INT64_MAX;
	uint64_t tw;
	if (s == ring_st && (b != NULL ? file_own(e, r, b, n, t, timeout_ns, &wake_at)
	                               : (file_inbox(e, r, n, t), 1))) {
		tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	} else {
		if (s == ring_st) {
			tmo__lf_ring_evict(e, r, prev); /* our base was busy: the long way */
			arm_announce(e, r, timeout_ns); /* the evict cleared it */
		} else if (s == lf_st(lf_word_gen(prev), LF_CANCELLED))
			lf_cache_put(e, r, old); /* another thread's cancel left it */
		tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
		arm_publish_filled(e, r, n, i, t);
	}
	lf_light_barrier(tw);
	if (LF_UNLIKELY(atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING))
		return arm_asleep(e, r, stamp, timeout_ns, wake_at);
	arm_unannounce(r);
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
	/* a stamp: the fast path's, announced in the hot record (arm_announce) */
	if (LF_UNLIKELY(lf_word_out(atomic_load_explicit(lf_timer_word(t), memory_order_relaxed)) ==
	                LF_PENDING)) {
		if (stamp != 0)
			arm_unannounce(tmo__lf_tls_hot.rec);
		return TMO_EARMED;
	}
	struct lf_rec *r = lf_rec_get(e);
	if (LF_UNLIKELY(r == NULL))
		return arm_slow(e, t, timeout_ns, cb, arg);
	struct lf_node *n = r->cache;
	if (n == NULL) {
		int err = TMO_ENOMEM;
		/* The fast path's announcement comes down first: a refill that
		 * grows the pool faults its pages in (13-25 us each on the 2-vCPU
		 * AMD EPYC VM, a step of up to 16), and a round fires nothing due
		 * at or after an announced lower bound while it is up (timer.c,
		 * Order).  Nothing of this arm is anywhere yet; it announces
		 * itself again and takes a new stamp when it goes the fast way
		 * below (tests/hooked/lf_refill.c). */
#ifndef TMO_LF_PLANT_REFILL_ANNOUNCED /* tests/hooked/lf_refill.c must catch it */
		if (stamp != 0)
			arm_unannounce(r);
#endif
		if ((n = tmo__lf_cache_refill(e, r, &err)) == NULL) {
			arm_unannounce(r);
			return err;
		}
		/* the fast path's arm (a stamp) found the cache empty: refilled,
		 * it goes the fast way, filed at once where its slot's arm lives
		 * (a burst of cancels, then of arms, empties the cache every
		 * LF_CHAIN arms); that arm announces itself again */
		if (stamp != 0)
			return tmo__lf_arm(e, t, timeout_ns, cb, arg);
	}
	r->cache = n->free_next;
	r->cache_n--;
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (stamp == 0) {
		arm_announce(e, r, timeout_ns);
		stamp = lf_stamp();
	}
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
			arm_unannounce(r);
			tmo__lf_ec_wake(&e->wake_ec); /* whatever it sleeps for: drain */
			return TMO_EAGAIN;
		}
		tmo__lf_ring_evict(e, r, prev); /* it announces the evicted arm, then clears */
		if (stamp == LF_STAMP_DEADLINE) /* timeout_ns holds the deadline */
			arm_announce_at(r, timeout_ns);
		else
			arm_announce(e, r, timeout_ns);
	}
#ifdef TMO_LF_PLANT_STEAL_DATE
	if (stamp != LF_STAMP_DEADLINE) /* arm_fast's plant, on this path too */
		stamp = LF_STAMP_NOW;
#endif
	arm_publish(e, r, n, i, t, timeout_ns, stamp, cb, arg);
	arm_unannounce(r);
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
	arm_announce(e, r, timeout_ns);
#ifdef TMO_LF_PLANT_STEAL_DATE
	/* no TSC read for an arm that stays in its slot */
	uint64_t stamp = LF_STAMP_NOW;
	if (LF_UNLIKELY(n == NULL ||
	                lf_word_out(atomic_load_explicit(word, memory_order_relaxed)) == LF_PENDING))
		return arm_general(e, t, timeout_ns, cb, arg, lf_tsc());
	if (atomic_load_explicit(slot, memory_order_relaxed) != 0) {
		uint64_t st = lf_tsc();
		if (st > atomic_load_explicit(&e->fresh_until, memory_order_acquire))
			return arm_general(e, t, timeout_ns, cb, arg, st);
		return arm_spill(e, t, timeout_ns, cb, arg, st);
	}
#else
	uint64_t stamp = lf_tsc();
	if (LF_UNLIKELY(n == NULL ||
	                lf_word_out(atomic_load_explicit(word, memory_order_relaxed)) == LF_PENDING ||
	                stamp > atomic_load_explicit(&e->fresh_until, memory_order_acquire)))
		return arm_general(e, t, timeout_ns, cb, arg, stamp);
	if (atomic_load_explicit(slot, memory_order_relaxed) != 0)
		return arm_spill(e, t, timeout_ns, cb, arg, stamp);
#endif
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
	atomic_signal_fence(memory_order_seq_cst); /* see ec.c: membarrier */
	if (LF_UNLIKELY(atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING))
		return arm_asleep(e, r, stamp, timeout_ns, INT64_MAX);
	arm_unannounce(r);
	return 0;
}

/* mpsc's and the wheel's arm. */
int tmo__lf_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb, void *arg)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (LF_UNLIKELY(tmo__lf_tls_hot.id != e->base.id || (tw & LF_TW_FENCE) != 0 ||
	                !tmo__lf_use_tsc))
		return arm_general(e, t, timeout_ns, cb, arg, 0);
	return arm_fast(e, t, timeout_ns, cb, arg);
}
