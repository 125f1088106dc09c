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

#include "lf.h"

/* Nodes the inbox may hold that its timer thread has not taken yet, before
 * an arm that would add one is refused (TMO_EAGAIN): tens of milliseconds
 * of its filing, the lateness (and, deadlines further apart than that,
 * the disorder) a flood of long timers may cause on mpsc. */
#define INBOX_MAX 65536u
/* A backlog at which a sleeping timer thread is woken whatever the
 * deadlines (a sixteenth of INBOX_MAX). */
#define INBOX_WAKE (INBOX_MAX / 16)

/* ---- publishing: inbox and bases ------------------------------------------------ */

void lf_inbox_post(struct tmo *e, struct lf_node *n)
{
	/* read before the push: once in the inbox the node may be filed, and
	 * these fields written over */
	uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
	int64_t timeout = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
	ck_stack_push_upmc(&e->inbox, &n->link);
	uint64_t in = atomic_fetch_add_explicit(&e->inbox_in, 1, memory_order_relaxed) + 1;
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING) {
		/* A sleeping timer thread need not wake for a late deadline, but
		 * a backlog it has not taken holds nodes (and nears INBOX_MAX,
		 * where arms are refused): past INBOX_WAKE it wakes anyway.  The
		 * deadline's bound is worked out here only (a conversion). */
		int64_t deadline_lower = 0;
		if (in - atomic_load_explicit(&e->inbox_out, memory_order_relaxed) < INBOX_WAKE)
			deadline_lower = lf_node_deadline_lower(e, stamp, timeout);
		lf_wake_for(e, deadline_lower);
	}
}

/* A lower bound on the deadline of a node its holder has in transit
 * (timer.c, Order: what the owner announces while it spills). */
static int64_t deadline_lower(struct tmo *e, struct lf_node *n)
{
	return lf_node_deadline_lower(e, atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed),
	                              atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed));
}

static void free_to(struct tmo *e, struct lf_rec *r, struct lf_node *n)
{
	if (r != NULL)
		lf_cache_put(e, r, n);
	else
		lf_free_bare(e, n);
}

/* Holder of b: file a node it holds in transit (QUEUED), or free it if a
 * cancel dropped it on the way.  `later`: a clock reading after its arm,
 * or 0 (read one if needed). */
static void base_file_locked(struct tmo *e, struct lf_base *b, struct lf_node *n, int64_t later,
                             struct lf_rec *r)
{
	const struct lf_sched *sc = e->p->sched;
	uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
	if (lf_st_of(s) == LF_QUEUED) {
		int64_t deadline = lf_node_deadline(e, n, later);
		/* `next` first: a timer thread that finds the base busy holds back
		 * what is due after `next`, which may be earlier than the base's
		 * first deadline, never later */
		if (deadline < atomic_load_explicit(&b->next, memory_order_relaxed))
			atomic_store_explicit(&b->next, deadline, memory_order_release);
		atomic_store_explicit(&n->aux, (uintptr_t)b | LF_IN_THREAD, memory_order_relaxed);
		sc->insert(lf_sched_of(b), n, deadline); /* a wheel never refuses */
		if (atomic_compare_exchange_strong_explicit(&n->state, &s,
		                                            lf_st(lf_gen_of(s), LF_IN_STRUCT),
		                                            memory_order_acq_rel, memory_order_acquire))
			return;
		sc->remove(lf_sched_of(b), n);
	}
	free_to(e, r, n); /* DROPPED on the way: the holder frees it */
}

void lf_base_tidy(struct tmo *e, struct lf_base *b, struct lf_rec *r)
{
	const struct lf_sched *sc = e->p->sched;
	/* looked at before it is taken: an exchange would own the line for
	 * nothing on nearly every filing */
	ck_stack_entry_t *l = ck_pr_load_ptr(&b->cancels.head) != NULL
	                          ? ck_stack_batch_pop_upmc(&b->cancels)
	                          : NULL;
	while (l != NULL) {
		ck_stack_entry_t *next = l->next;
		struct lf_node *n = lf_node_of_link(l);
		if (sc->contains(n))
			sc->remove(lf_sched_of(b), n);
		free_to(e, r, n);
		l = next;
	}
	if (ck_pr_load_ptr(&b->tofile.head) == NULL)
		return;
	l = ck_stack_batch_pop_upmc(&b->tofile);
	int64_t later = tmo_now_ns(); /* after every arm in the chain */
	ck_stack_entry_t *rev = NULL;
	while (l != NULL) { /* oldest first */
		ck_stack_entry_t *next = l->next;
		l->next = rev;
		rev = l;
		l = next;
	}
	while (rev != NULL) {
		struct lf_node *n = lf_node_of_link(rev);
		rev = rev->next; /* before filing: a cancel may push it again */
		base_file_locked(e, b, n, later, r);
	}
}

struct soon_chain {
	struct lf_base *b;
	struct lf_node *head, *tail;
};

static void soon_add(void *ctx, struct lf_node *n)
{
	struct soon_chain *c = ctx;
	uint64_t s = atomic_load_explicit(&n->state, memory_order_relaxed);
	/* a node whose cancel won is out of the wheel now: its canceller (or
	 * the base's next holder, from the cancel stack) frees it */
	if (lf_st_of(s) != LF_IN_STRUCT ||
	    !atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(lf_gen_of(s), LF_QUEUED),
	                                             memory_order_acq_rel, memory_order_relaxed))
		return;
	n->s.soon.next = NULL;
	if (c->tail != NULL)
		c->tail->s.soon.next = n;
	else
		c->head = n;
	c->tail = n;
}

void lf_base_hand_off(struct tmo *e, struct lf_base *b, int64_t horizon)
{
	const struct lf_sched *sc = e->p->sched;
	struct soon_chain c = {b, NULL, NULL};
	sc->collect(lf_sched_of(b), horizon, soon_add, &c);
	if (c.head != NULL) {
		struct lf_node *old = atomic_load_explicit(&b->soon, memory_order_relaxed);
		do
			c.tail->s.soon.next = old;
		while (!atomic_compare_exchange_weak_explicit(&b->soon, &old, c.head,
		                                              memory_order_release,
		                                              memory_order_relaxed));
	}
	/* After the push: the timer thread reads `next`, then takes the list;
	 * seeing this value it sees the list too. */
	atomic_store_explicit(&b->next, sc->next_deadline(lf_sched_of(b)), memory_order_release);
}

/* The latest tick's clock reading: a `now` no later than now. */
static inline int64_t coarse_now(struct tmo *e)
{
	return atomic_load_explicit(&e->tick_at, memory_order_relaxed);
}

/* After a filing into our own base: hand what comes due soon to the timer
 * thread, and say when the base wants it to look (0: at once). */
static int64_t own_base_release(struct tmo *e, struct lf_base *b, struct lf_rec *r)
{
	if (ck_pr_load_ptr(&b->cancels.head) != NULL || ck_pr_load_ptr(&b->tofile.head) != NULL)
		lf_base_tidy(e, b, r);
	/* While this thread keeps spilling it hands what comes due soon to
	 * the timer thread itself: that thread need not take the lock
	 * (which would send our spills the long way meanwhile). */
	int64_t horizon = coarse_now(e) + LF_SOON_NS;
	if (atomic_load_explicit(&b->next, memory_order_relaxed) <= horizon)
		lf_base_hand_off(e, b, horizon);
	int64_t wake_at = atomic_load_explicit(&b->next, memory_order_relaxed);
	if (atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)
		wake_at = 0;
	lf_base_unlock(b);
	return wake_at;
}

static void wake_if_sleeping(struct tmo *e, int64_t wake_at)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		lf_wake_for(e, wake_at);
}

/* File a node we took out of our ring (QUEUED) in our own base.  With the
 * base busy (the timer thread collecting from it) the node waits on its
 * tofile stack for the next holder: its owner's next filing, or the timer
 * thread, which looks at every such stack. */
static void file_own_base(struct tmo *e, struct lf_rec *r, struct lf_node *n)
{
	struct lf_base *b = r->base;
	int64_t wake_at = 0;
	if (lf_base_trylock(b)) {
		base_file_locked(e, b, n, 0, r);
		wake_at = own_base_release(e, b, r);
	} else {
		/* dated now: the calibration its next holder finds may be newer */
		int64_t deadline = lf_node_deadline(e, n, 0);
		atomic_store_explicit(&n->s.q.timeout, deadline, memory_order_relaxed);
		atomic_store_explicit(&n->s.q.stamp, LF_STAMP_DEADLINE, memory_order_relaxed);
		ck_stack_push_upmc(&b->tofile, &n->link);
	}
	wake_if_sleeping(e, wake_at);
}

/* The ring arm (n, gen) goes straight into our own base, held: one CAS
 * RING -> IN_STRUCT, no transit.  Its aux already names the base (arm
 * wrote it), so a canceller that wins the node next finds it; until the
 * node is in the wheel only we hold the base, and a cancel that comes
 * between (another thread's: CANCEL_PENDING, on the cancel stack) is
 * undone by the tidy after the insert.  Returns 0 when the node was no
 * longer in the ring (*s: its state). */
static int file_from_ring(struct tmo *e, struct lf_rec *r, struct lf_node *n, uint64_t *s)
{
	struct lf_base *b = r->base;
	if (!atomic_compare_exchange_strong_explicit(&n->state, s,
	                                             lf_st(lf_gen_of(*s), LF_IN_STRUCT),
	                                             memory_order_acq_rel, memory_order_acquire))
		return 0;
	/* we own the fields until the insert */
	int64_t deadline = lf_node_deadline_own(e, r, n);
	if (deadline < atomic_load_explicit(&b->next, memory_order_relaxed))
		atomic_store_explicit(&b->next, deadline, memory_order_release);
	tmo__wheel_add(lf_own_wheel(b), &n->s.wheel, deadline);
	return 1;
}

/* A slot of our ring is needed again (or we detach) while it holds arm w:
 * spill the arm if it is still in the ring, reclaim the node if another
 * thread's cancel took the arm back, else (the timer thread stole it)
 * leave it. */
void lf_ring_evict(struct tmo *e, struct lf_rec *r, uint64_t w)
{
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t gen = lf_word_gen(w);
	uint64_t s = lf_st(gen, LF_RING);
	/* Announced before the CAS (timer.c, Order): a timer thread that finds
	 * the CAS done finds this too.  Its deadline (1: unknown yet) once the
	 * CAS won: the node may have moved on before.  Filed straight from the
	 * ring into our own base, it stays unknown until the insert is done. */
	atomic_store_explicit(&r->transit, 1, memory_order_relaxed);
	if (r->base != NULL && lf_base_trylock(r->base)) {
		if (file_from_ring(e, r, n, &s)) {
			lf_bump(&r->spilled);
			int64_t wake_at = own_base_release(e, r->base, r);
			atomic_store_explicit(&r->transit, 0, memory_order_release);
			wake_if_sleeping(e, wake_at);
			return;
		}
		lf_base_unlock(r->base);
	} else if (atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_QUEUED),
	                                                   memory_order_acq_rel,
	                                                   memory_order_acquire)) {
		int64_t lower = deadline_lower(e, n);
		if (lower > 0)
			atomic_store_explicit(&r->transit, lower, memory_order_relaxed);
		lf_bump(&r->spilled);
		if (r->base != NULL)
			file_own_base(e, r, n);
		else
			lf_inbox_post(e, n);
		atomic_store_explicit(&r->transit, 0, memory_order_release);
		return;
	}
	atomic_store_explicit(&r->transit, 0, memory_order_release);
	if (s == lf_st(gen, LF_CANCELLED))
		lf_cache_put(e, r, n);
}

/* ---- arm -------------------------------------------------------------------------- */

static int arm_bare(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                    void *arg)
{
	int err = TMO_ENOMEM;
	struct lf_node *n = lf_alloc_bare(e, &err);
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
	lf_inbox_post(e, n);
	return 0;
}

static __attribute__((noinline)) int arm_slow(struct tmo *e, struct tmo_timer *t,
                                              int64_t timeout_ns, tmo_callback *cb, void *arg)
{
	if (tmo__thread_engine == e)
		return lf_arm_on_timer(e, t, timeout_ns, cb, arg);
	return arm_bare(e, t, timeout_ns, cb, arg);
}

/* From the values arm stored: once published, the node may be stolen
 * and filed, and its fields rewritten.  Returns 0 (arm's result). */
static __attribute__((noinline)) int arm_wake(struct tmo *e, uint64_t stamp, int64_t timeout_ns)
{
	lf_wake_for(e, lf_node_deadline_lower(e, stamp, timeout_ns));
	return 0;
}

/* Fill n for its next arm, of t in slot i of r, and publish it. */
static inline void arm_publish(struct tmo *e, struct lf_rec *r, struct lf_node *n, uint32_t i,
                               struct tmo_timer *t, int64_t timeout_ns, uint64_t stamp,
                               tmo_callback *cb, void *arg)
{
	uint64_t st = lf_next_ring(atomic_load_explicit(&n->state, memory_order_relaxed));
	n->timer = t;
	atomic_store_explicit(&n->s.q.timeout, timeout_ns, memory_order_relaxed);
	atomic_store_explicit(&n->s.q.stamp, stamp, memory_order_relaxed);
	t->cb = cb;
	t->arg = arg;
	uint64_t w = lf_word(lf_idx_of(e, n), lf_gen_of(st), LF_PENDING);
	atomic_store_explicit(&n->aux, (uintptr_t)r->base | LF_IN_THREAD, memory_order_relaxed);
	/* the timer's word before the slot: once in the slot the arm may be
	 * stolen and fire, and fire writes FIRED over it */
	atomic_store_explicit(&n->state, st, memory_order_release);
	atomic_store_explicit(lf_timer_word(t), w, memory_order_release);
	atomic_store_explicit(&r->ring[i], w, memory_order_release);
	lf_bump(&r->head);
}

/* mpsc: the inbox holds more than INBOX_MAX nodes its timer thread has
 * not taken (the wheel files in its own base: never full). */
static inline int inbox_full(struct tmo *e, const struct lf_rec *r)
{
	return r->base == NULL && atomic_load_explicit(&e->inbox_in, memory_order_relaxed) -
	                                  atomic_load_explicit(&e->inbox_out, memory_order_relaxed) >
	                              INBOX_MAX;
}

/* The fast path's arm whose ring slot still holds an arm: a timer that
 * outlived the ring (held timers).  The slot's arm goes to our base (or
 * the inbox), then this one takes its place, dated by the fast path's
 * stamp. */
static __attribute__((noinline)) int arm_spill(struct tmo *e, struct tmo_timer *t,
                                               int64_t timeout_ns, tmo_callback *cb, void *arg,
                                               uint64_t stamp)
{
	struct lf_rec *r = lf_tls_hot.rec;
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	uint32_t i = (uint32_t)atomic_load_explicit(&r->head, memory_order_relaxed) &
	             (LF_RING_SLOTS - 1);
	if (LF_UNLIKELY(inbox_full(e, r))) {
		lf_ec_wake(&e->wake_ec); /* whatever it sleeps for: drain */
		return TMO_EAGAIN;
	}
	lf_ring_evict(e, r, atomic_load_explicit(&r->ring[i], memory_order_relaxed));
	struct lf_node *n = r->cache; /* the fast path saw one; evicting only adds */
	r->cache = n->free_next;
	r->cache_n--;
	arm_publish(e, r, n, i, t, timeout_ns, stamp, cb, arg);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		return arm_wake(e, stamp, timeout_ns);
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
		if ((n = lf_cache_refill(e, r, &err)) == NULL)
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
			lf_ec_wake(&e->wake_ec); /* whatever it sleeps for: drain */
			return TMO_EAGAIN;
		}
		lf_ring_evict(e, r, prev);
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
	struct lf_rec *r = lf_tls_hot.rec;
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
int lf_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb, void *arg)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (LF_UNLIKELY(lf_tls_hot.id != e->base.id || (tw & (LF_TW_SLEEPING | LF_TW_FENCE)) != 0 ||
	                !lf_use_tsc))
		return arm_general(e, t, timeout_ns, cb, arg, 0);
	return arm_fast(e, t, timeout_ns, cb, arg);
}
