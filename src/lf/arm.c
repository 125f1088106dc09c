/*
 * arm and cancel, and the records behind them: what the application's
 * threads run (lf.h has the design).
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

/* ---- records and the thread-local cache --------------------------------------- */

/* Engines a thread keeps a record for besides the hot one; using more
 * detaches the least recently used (its record stays with the engine). */
#define TLS_MORE 4
/* Nodes the inbox may hold that its timer thread has not taken yet, before
 * an arm that would add one is refused (TMO_EAGAIN): tens of milliseconds
 * of its filing, the lateness (and, deadlines further apart than that,
 * the disorder) a flood of long timers may cause on mpsc. */
#define INBOX_MAX 65536u
/* A backlog at which a sleeping timer thread is woken whatever the
 * deadlines (a sixteenth of INBOX_MAX). */
#define INBOX_WAKE (INBOX_MAX / 16)

struct tls_ent {
	uint64_t id; /* the engine's tmo_base.id; 0: empty */
	struct lf_rec *rec;
};

#define TLS_IE __attribute__((tls_model("initial-exec")))
static _Thread_local struct tls_ent tls_hot TLS_IE;
static _Thread_local struct tls_ent tls_more[TLS_MORE];
static _Thread_local unsigned tls_victim;
/* 0: no exit hook yet; 1: the exit hook will run; 2: it ran (this thread
 * is exiting: later arms and cancels take the record-less path) */
static _Thread_local int tls_state;

/* Live engines of this core, so a thread's exit hook only touches records
 * of engines that still exist (ids are never reused). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tmo **g_engines;
static size_t g_len, g_cap;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;

static void tls_exit(void *unused);
static void fork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void fork_after(void) { pthread_mutex_unlock(&g_lock); }
static void once_init(void)
{
	g_key_ok = pthread_key_create(&g_key, tls_exit) == 0;
	pthread_atfork(fork_prepare, fork_after, fork_after);
}

void lf_engine_register(struct tmo *e)
{
	pthread_once(&g_once, once_init);
	pthread_mutex_lock(&g_lock);
	if (g_len == g_cap) {
		size_t cap = g_cap ? 2 * g_cap : 16;
		struct tmo **n = realloc(g_engines, cap * sizeof *n);
		if (n == NULL)
			abort(); /* a few pointers; the engine is already built */
		g_engines = n;
		g_cap = cap;
	}
	g_engines[g_len++] = e;
	pthread_mutex_unlock(&g_lock);
}

void lf_engine_unregister(struct tmo *e)
{
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < g_len; i++)
		if (g_engines[i] == e) {
			g_engines[i] = g_engines[--g_len];
			break;
		}
	pthread_mutex_unlock(&g_lock);
}

/* g_lock held. */
static struct tmo *engine_by_id(uint64_t id)
{
	for (size_t i = 0; i < g_len; i++)
		if (atomic_load_explicit((_Atomic uint64_t *)&g_engines[i]->base.id,
		                         memory_order_relaxed) == id)
			return g_engines[i];
	return NULL;
}

static inline uint64_t id_of(struct tmo *e)
{
	return atomic_load_explicit((_Atomic uint64_t *)&e->base.id, memory_order_relaxed);
}

struct lf_rec *lf_rec_new(struct tmo *e)
{
	struct lf_rec *r = tmo__aligned_alloc(64, sizeof *r);
	if (r == NULL)
		return NULL;
	memset(r, 0, sizeof *r);
	if (e->p->thread_bases && (r->base = lf_base_new(e)) == NULL) {
		tmo__free(r);
		return NULL;
	}
	atomic_fetch_add_explicit(&e->rec_bytes, sizeof *r, memory_order_relaxed);
	return r;
}

void lf_recs_free(struct tmo *e)
{
	struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire);
	while (r != NULL) {
		struct lf_rec *next = atomic_load_explicit(&r->next, memory_order_relaxed);
		if (r->base != NULL)
			lf_base_free(e, r->base);
		tmo__free(r);
		r = next;
	}
	atomic_store_explicit(&e->recs, NULL, memory_order_relaxed);
}

static int64_t ring_evict(struct tmo *e, struct lf_rec *r, uint32_t i, uint64_t w);

/* The calling thread gives r back (its exit, or it uses too many engines):
 * ring nodes go to the inbox, free nodes to the depot; the record, its
 * counters and its base stay with the engine for the next thread. */
static void rec_detach(struct tmo *e, struct lf_rec *r)
{
	for (uint32_t i = 0; i < LF_RING_SLOTS; i++) {
		uint64_t w = atomic_load_explicit(&r->ring[i], memory_order_relaxed);
		if (w != 0)
			ring_evict(e, r, i, w);
		atomic_store_explicit(&r->ring[i], 0, memory_order_relaxed);
	}
	lf_cache_return(e, r);
	pthread_mutex_lock(&e->rec_lock);
	r->attached = 0;
	r->next_free = e->free_recs;
	e->free_recs = r;
	pthread_mutex_unlock(&e->rec_lock);
}

/* Detach the entry's record if its engine still exists (g_lock held). */
static void ent_drop_locked(struct tls_ent *x)
{
	struct tmo *e = x->id != 0 ? engine_by_id(x->id) : NULL;
	if (e != NULL)
		rec_detach(e, x->rec);
	x->id = 0;
	x->rec = NULL;
}

static void tls_exit(void *unused)
{
	(void)unused;
	tls_state = 2;
	pthread_mutex_lock(&g_lock);
	ent_drop_locked(&tls_hot);
	for (unsigned i = 0; i < TLS_MORE; i++)
		ent_drop_locked(&tls_more[i]);
	pthread_mutex_unlock(&g_lock);
}

static struct lf_rec *rec_attach(struct tmo *e)
{
	pthread_mutex_lock(&e->rec_lock);
	struct lf_rec *r = e->free_recs;
	if (r != NULL) {
		e->free_recs = r->next_free;
	} else if ((r = lf_rec_new(e)) != NULL) {
		atomic_store_explicit(&r->next, atomic_load_explicit(&e->recs, memory_order_relaxed),
		                      memory_order_relaxed);
		/* release: the timer thread walks the list without the lock */
		atomic_store_explicit(&e->recs, r, memory_order_release);
	}
	if (r != NULL)
		r->attached = 1;
	pthread_mutex_unlock(&e->rec_lock);
	return r;
}

/* The calling thread's record for e, attaching one; NULL on the timer
 * thread, after this thread's exit hook ran, or out of memory. */
static struct lf_rec *rec_slow(struct tmo *e)
{
	if (tls_state == 2 || tmo__thread_engine == e)
		return NULL;
	uint64_t id = id_of(e);
	for (unsigned i = 0; i < TLS_MORE; i++) {
		if (tls_more[i].id == id) {
			struct tls_ent x = tls_more[i];
			tls_more[i] = tls_hot;
			tls_hot = x;
			return x.rec;
		}
	}
	pthread_once(&g_once, once_init);
	if (tls_state == 0 && g_key_ok && pthread_setspecific(g_key, &tls_hot) == 0)
		tls_state = 1; /* only so that tls_exit runs */
	struct lf_rec *r = rec_attach(e);
	if (r == NULL)
		return NULL;
	/* the hot entry moves to a free (or the victim's) place */
	if (tls_hot.id != 0) {
		unsigned k = TLS_MORE;
		for (unsigned i = 0; i < TLS_MORE && k == TLS_MORE; i++)
			if (tls_more[i].id == 0)
				k = i;
		if (k == TLS_MORE) {
			k = tls_victim++ % TLS_MORE;
			pthread_mutex_lock(&g_lock);
			ent_drop_locked(&tls_more[k]);
			pthread_mutex_unlock(&g_lock);
		}
		tls_more[k] = tls_hot;
	}
	tls_hot.id = id;
	tls_hot.rec = r;
	return r;
}

static inline struct lf_rec *rec_get(struct tmo *e)
{
	if (LF_LIKELY(tls_hot.id == e->base.id))
		return tls_hot.rec;
	return rec_slow(e);
}

uint64_t lf_my_cache_count(struct tmo *e)
{
	return tls_hot.id == e->base.id ? tls_hot.rec->cache_n : 0;
}

static inline void bump(_Atomic uint64_t *c)
{
	/* one writer: a plain increment, atomic only so readers see no race */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

static void count_prevented(struct tmo *e)
{
	struct lf_rec *r = rec_get(e);
	if (r != NULL)
		bump(&r->prevented);
	else if (tmo__thread_engine == e)
		bump(&e->tt_rec->prevented);
	else
		atomic_fetch_add_explicit(&e->prevented_bare, 1, memory_order_relaxed);
}


/* ---- publishing: inbox and bases ------------------------------------------------ */

void lf_inbox_post(struct tmo *e, struct lf_node *n, int64_t deadline_lower)
{
	ck_stack_push_upmc(&e->inbox, &n->link);
	uint64_t in = atomic_fetch_add_explicit(&e->inbox_in, 1, memory_order_relaxed) + 1;
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING) {
		/* A sleeping timer thread need not wake for a late deadline, but
		 * a backlog it has not taken holds nodes (and nears INBOX_MAX,
		 * where arms are refused): past INBOX_WAKE it wakes anyway. */
		if (in - atomic_load_explicit(&e->inbox_out, memory_order_relaxed) >= INBOX_WAKE)
			deadline_lower = 0;
		lf_wake_for(e, deadline_lower);
	}
}

static int64_t deadline_lower(struct tmo *e, struct lf_node *n)
{
	int64_t lo = lf_arm_time_lower(e, atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed));
	return lo > 0 ? lo + atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed) : 0;
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
		uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
		int64_t deadline = atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
		if (stamp != LF_STAMP_DEADLINE)
			deadline += lf_arm_time_upper_before(e, stamp, later);
		atomic_store_explicit(&n->aux, (uintptr_t)b | LF_IN_THREAD, memory_order_relaxed);
		sc->insert(lf_sched_of(b), n, deadline); /* a wheel never refuses */
		if (atomic_compare_exchange_strong_explicit(&n->state, &s,
		                                            lf_st(lf_gen_of(s), LF_IN_STRUCT),
		                                            memory_order_acq_rel, memory_order_acquire)) {
			if (deadline < atomic_load_explicit(&b->next, memory_order_relaxed))
				atomic_store_explicit(&b->next, deadline, memory_order_release);
			return;
		}
		sc->remove(lf_sched_of(b), n);
	}
	free_to(e, r, n); /* DROPPED on the way: the holder frees it */
}

void lf_base_tidy(struct tmo *e, struct lf_base *b, struct lf_rec *r)
{
	const struct lf_sched *sc = e->p->sched;
	ck_stack_entry_t *l = ck_stack_batch_pop_upmc(&b->cancels);
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
	uint64_t k = atomic_load_explicit(&e->tickw, memory_order_acquire) >> LF_TW_SHIFT;
	return atomic_load_explicit(&e->tab[k % LF_TICKS].ns, memory_order_relaxed);
}

/* File a node we took out of our ring (QUEUED) in our own base.  With the
 * base busy (the timer thread collecting from it) the node waits on its
 * tofile stack for the next holder: its owner's next filing, or the timer
 * thread, which looks at every such stack. */
static void file_own_base(struct tmo *e, struct lf_rec *r, struct lf_node *n, int64_t later)
{
	struct lf_base *b = r->base;
	int64_t wake_at = 0;
	if (lf_base_trylock(b)) {
		base_file_locked(e, b, n, later, r);
		lf_base_tidy(e, b, r);
		/* While this thread keeps spilling it hands what comes due soon to
		 * the timer thread itself: that thread need not take the lock
		 * (which would send our spills the long way meanwhile). */
		int64_t horizon = coarse_now(e) + LF_SOON_NS;
		if (atomic_load_explicit(&b->next, memory_order_relaxed) <= horizon)
			lf_base_hand_off(e, b, horizon);
		wake_at = atomic_load_explicit(&b->next, memory_order_relaxed);
		if (atomic_load_explicit(&b->soon, memory_order_relaxed) != NULL)
			wake_at = 0;
		lf_base_unlock(b);
	} else {
		/* dated now, while the arm is recent: its next holder may come
		 * much later */
		int64_t deadline =
		    lf_arm_time_upper_before(
		        e, atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed), later) +
		    atomic_load_explicit(&n->s.q.timeout, memory_order_relaxed);
		atomic_store_explicit(&n->s.q.timeout, deadline, memory_order_relaxed);
		atomic_store_explicit(&n->s.q.stamp, LF_STAMP_DEADLINE, memory_order_relaxed);
		ck_stack_push_upmc(&b->tofile, &n->link);
	}
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		lf_wake_for(e, wake_at);
}

/* Bound slot i's arm w by the clock reading `later` (see lf_rec). */
static inline void slot_bound(struct lf_rec *r, uint32_t i, uint64_t w, int64_t later)
{
	atomic_store_explicit(&r->bound_ns[i], later, memory_order_relaxed);
	atomic_store_explicit(&r->bound_w[i], w, memory_order_release);
}

/* Slot i of our ring is needed again (or we detach) while it holds arm w:
 * spill the arm if it is still in the ring, reclaim the node if another
 * thread's cancel took the arm back, else (the timer thread stole it)
 * leave it.  Returns the clock reading the spill took (0: none): every arm
 * this thread made so far was made before it. */
static int64_t ring_evict(struct tmo *e, struct lf_rec *r, uint32_t i, uint64_t w)
{
	(void)i;
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	uint64_t gen = lf_word_gen(w);
	uint64_t s = lf_st(gen, LF_RING);
	int64_t later = 0;
	if (atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_QUEUED),
	                                            memory_order_acq_rel, memory_order_acquire)) {
		bump(&r->spilled);
		if (r->base != NULL) {
			/* Coarse dating whose tick has not closed on time: the
			 * reading that dates this spill bounds the ring's other arms
			 * too, should the timer thread steal them late. */
			uint64_t stamp = atomic_load_explicit(&n->s.q.stamp, memory_order_relaxed);
			if (!(stamp & LF_PRECISE) && !lf_tick_closed_on_time(e, stamp)) {
				later = tmo_now_ns();
				for (uint32_t j = 0; j < LF_RING_SLOTS; j++) {
					uint64_t x = atomic_load_explicit(&r->ring[j], memory_order_relaxed);
					if (x != 0 && j != i)
						slot_bound(r, j, x, later);
				}
			}
			file_own_base(e, r, n, later);
		} else {
			lf_inbox_post(e, n, deadline_lower(e, n));
		}
	} else if (s == lf_st(gen, LF_CANCELLED)) {
		lf_cache_put(e, r, n);
	}
	return later;
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
	atomic_store_explicit(&n->s.q.timeout, timeout_ns, memory_order_relaxed);
	atomic_store_explicit(&n->s.q.stamp, lf_stamp_precise(), memory_order_relaxed);
	t->cb = cb;
	t->arg = arg;
	atomic_store_explicit(&n->state, lf_st(gen, LF_QUEUED), memory_order_release);
	atomic_store_explicit(lf_timer_word(t), lf_word(lf_idx_of(e, n), gen, LF_PENDING),
	                      memory_order_release);
	atomic_fetch_add_explicit(&e->armed_bare, 1, memory_order_relaxed);
	lf_inbox_post(e, n, deadline_lower(e, n));
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
	int64_t lo = lf_arm_time_lower(e, stamp);
	lf_wake_for(e, lo > 0 ? lo + timeout_ns : 0);
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
	/* the timer's word before the slot: once in the slot the arm may be
	 * stolen and fire, and fire writes FIRED over it */
	atomic_store_explicit(&n->state, st, memory_order_release);
	atomic_store_explicit(lf_timer_word(t), w, memory_order_release);
	atomic_store_explicit(&r->ring[i], w, memory_order_release);
	bump(&r->head);
}

/* Every arm the fast path below does not take: a new record, an empty
 * cache, a slot still in use, precise dating, fences, a timer still armed,
 * the timer thread or a thread whose exit hook ran. */
static __attribute__((noinline)) int arm_general(struct tmo *e, struct tmo_timer *t,
                                                 int64_t timeout_ns, tmo_callback *cb, void *arg)
{
	if (LF_UNLIKELY(lf_word_out(atomic_load_explicit(lf_timer_word(t), memory_order_relaxed)) ==
	                LF_PENDING))
		return TMO_EARMED;
	struct lf_rec *r = rec_get(e);
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
	uint64_t stamp = tw & LF_TW_PRECISE ? lf_stamp_precise() : tw >> LF_TW_SHIFT;
	uint32_t i = (uint32_t)atomic_load_explicit(&r->head, memory_order_relaxed) &
	             (LF_RING_SLOTS - 1);
	uint64_t prev = atomic_load_explicit(&r->ring[i], memory_order_relaxed);
	if (prev != 0) {
		/* Flow control without waiting: the slot's arm would go to the
		 * timer thread through the inbox while that thread is already
		 * INBOX_MAX nodes behind; refuse this arm instead. */
		if (r->base == NULL && atomic_load_explicit(&e->inbox_in, memory_order_relaxed) -
		                               atomic_load_explicit(&e->inbox_out,
		                                                    memory_order_relaxed) >
		                           INBOX_MAX) {
			lf_cache_put(e, r, n);
			lf_ec_wake(&e->wake_ec); /* whatever it sleeps for: drain */
			return TMO_EAGAIN;
		}
		int64_t later = ring_evict(e, r, i, prev);
		arm_publish(e, r, n, i, t, timeout_ns, stamp, cb, arg);
		if (later != 0 && !(stamp & LF_PRECISE)) /* this arm's stamp came first */
			slot_bound(r, i, atomic_load_explicit(&r->ring[i], memory_order_relaxed), later);
	} else {
		arm_publish(e, r, n, i, t, timeout_ns, stamp, cb, arg);
	}
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		return arm_wake(e, stamp, timeout_ns);
	return 0;
}

/* The fast path: this thread's record is the hot one, its cache has a node,
 * the next slot is free, the timer thread is awake and no fence is needed.
 * Nothing here calls a function but in tail position, and stores are
 * ordered so that few values stay live: it needs few registers saved.
 * `precise`: a constant, so each caller gets its own copy. */
static inline __attribute__((always_inline)) int arm_fast(struct tmo *e, struct tmo_timer *t,
                                                          int64_t timeout_ns, tmo_callback *cb,
                                                          void *arg, uint64_t tw, int precise)
{
	struct lf_rec *r = tls_hot.rec;
	struct lf_node *n = r->cache;
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	_Atomic uint64_t *slot = &r->ring[head & (LF_RING_SLOTS - 1)];
	_Atomic uint64_t *word = lf_timer_word(t);
	if (LF_UNLIKELY(n == NULL || atomic_load_explicit(slot, memory_order_relaxed) != 0 ||
	                lf_word_out(atomic_load_explicit(word, memory_order_relaxed)) == LF_PENDING))
		return arm_general(e, t, timeout_ns, cb, arg);
	t->cb = cb;
	t->arg = arg;
	r->cache = n->free_next;
	r->cache_n--;
	n->timer = t;
	atomic_store_explicit(&n->s.q.timeout, timeout_ns, memory_order_relaxed);
	uint64_t stamp = precise ? LF_PRECISE | __builtin_ia32_rdtsc() : tw >> LF_TW_SHIFT;
	atomic_store_explicit(&n->s.q.stamp, stamp, memory_order_relaxed);
	uint64_t st = lf_next_ring(atomic_load_explicit(&n->state, memory_order_relaxed));
	/* lf_word(index, generation, LF_PENDING): index << 2 is the offset >> 4 */
	uint64_t w = st + ((uint64_t)((char *)n - e->pool.arena) >> 4);
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

/* A wheel arm the tick word sends off the coarse path: precise dating
 * (ticks late), or anything arm_general handles. */
static __attribute__((noinline)) int arm_other(struct tmo *e, struct tmo_timer *t,
                                               int64_t timeout_ns, tmo_callback *cb, void *arg,
                                               uint64_t tw)
{
	if (tls_hot.id == e->base.id && (tw & (LF_TW_SLEEPING | LF_TW_FENCE)) == 0 && lf_use_tsc)
		return arm_fast(e, t, timeout_ns, cb, arg, tw, 1);
	return arm_general(e, t, timeout_ns, cb, arg);
}

/* mpsc's arm: dated by the TSC always. */
int lf_arm_precise(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                   void *arg)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (LF_UNLIKELY(tls_hot.id != e->base.id || (tw & (LF_TW_SLEEPING | LF_TW_FENCE)) != 0 ||
	                !lf_use_tsc))
		return arm_general(e, t, timeout_ns, cb, arg);
	return arm_fast(e, t, timeout_ns, cb, arg, tw, 1);
}

/* The wheel's arm: dated by the published tick unless it says precise. */
int lf_arm_ticked(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                  void *arg)
{
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	if (LF_UNLIKELY(tls_hot.id != e->base.id ||
	                (tw & (LF_TW_SLEEPING | LF_TW_FENCE | LF_TW_PRECISE)) != 0))
		return arm_other(e, t, timeout_ns, cb, arg, tw);
	return arm_fast(e, t, timeout_ns, cb, arg, tw, 0);
}

/* ---- cancel ----------------------------------------------------------------------- */

/* Wait until the callback of (n, gen) has returned. */
static void wait_firing(struct tmo *e, struct lf_node *n, uint64_t gen)
{
	for (;;) {
		uint32_t v = lf_ec_value(&e->done_ec);
		if (atomic_load_explicit(&n->state, memory_order_acquire) != lf_st(gen, LF_FIRING))
			return;
		lf_ec_wait(&e->done_ec, v, INT64_MAX);
	}
}

/* A cancel that prevented an arm its own callback made (a re-arm, filed by
 * the timer thread) returns only after that callback returned [3]. */
static int prevented_return(struct tmo *e, struct tmo_timer *t)
{
	if (LF_UNLIKELY(atomic_load_explicit(&e->running, memory_order_acquire) == t) &&
	    tmo__thread_engine != e) {
		for (;;) {
			uint32_t v = lf_ec_value(&e->done_ec);
			if (atomic_load_explicit(&e->running, memory_order_acquire) != t)
				break;
			lf_ec_wait(&e->done_ec, v, INT64_MAX);
		}
	}
	return TMO_CANCEL_PREVENTED;
}

/* A filed arm was prevented (CANCEL_PENDING, ours): take it out of our own
 * base if we can have its lock at once; any other base's holder (its owner,
 * or the timer thread at its next look) removes and frees it from the
 * base's cancel stack.  Never trylock another thread's base: its lock line
 * would travel between the two cores on every cross-thread cancel. */
static void unfile(struct tmo *e, struct lf_node *n)
{
	uintptr_t aux = atomic_load_explicit(&n->aux, memory_order_relaxed);
	struct lf_base *b = (aux & 3u) == LF_IN_THREAD ? (struct lf_base *)(aux & ~(uintptr_t)3)
	                                                : e->tt_base;
	struct lf_rec *r = rec_get(e);
	if (r != NULL && r->base == b && lf_base_trylock(b)) {
		const struct lf_sched *sc = e->p->sched;
		if (sc->contains(n))
			sc->remove(lf_sched_of(b), n);
		/* else the timer thread collected it as due: its CAS to FIRING
		 * fails on our state, and it never frees a node it did not fire */
		lf_base_unlock(b);
		lf_cache_put(e, r, n);
		return;
	}
	ck_stack_push_upmc(&b->cancels, &n->link);
	/* the holder frees it; make sure one comes soon (no retention) */
	uint64_t tw = atomic_load_explicit(&e->tickw, memory_order_relaxed);
	lf_light_barrier(tw);
	if (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING)
		lf_wake_for(e, 0);
}

static void ring_take_back(struct tmo *e, uint64_t w, struct lf_node *n);

static __attribute__((noinline)) int cancel_slow(struct tmo *e, struct tmo_timer *t,
                                                 uint64_t w)
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
				if (!atomic_compare_exchange_strong_explicit(
				        &n->state, &s, lf_st(gen, LF_CANCEL_PENDING),
				        memory_order_acq_rel, memory_order_acquire))
					continue;
				atomic_store_explicit(word, cancelled, memory_order_release);
				count_prevented(e);
				unfile(e, n);
				return prevented_return(e, t);
			}
			if (st == LF_CANCELLED || st == LF_CANCEL_PENDING || st == LF_DROPPED)
				return TMO_ENOTARMED; /* a concurrent cancel won */
		}
		if (st == LF_FIRING) {
			if (tmo__thread_engine == e)
				return TMO_CANCEL_SELF; /* one callback at a time: ours */
			wait_firing(e, n, gen);
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
			prevented_return(e, t); /* waits until it is not running */
			waited = 1;
			continue;
		}
		if (atomic_load_explicit(word, memory_order_acquire) != w)
			continue;
		return waited ? TMO_CANCEL_WAITED : TMO_CANCEL_FIRED;
	}
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
	struct lf_rec *r = rec_get(e);
	int k = r != NULL ? ring_find(r, w) : -1;
	if (k < 0)
		return;
	atomic_store_explicit(&r->ring[k], 0, memory_order_relaxed);
	lf_cache_put(e, r, n);
}

static __attribute__((noinline)) int cancel_ring_other(struct tmo *e, uint64_t w,
                                                       struct lf_node *n)
{
	count_prevented(e);
	ring_take_back(e, w, n);
	return TMO_CANCEL_PREVENTED;
}

/* The fast path: the arm is still in a ring, and it is the last arm of
 * this thread's hot record. */
int lf_cancel(struct tmo *e, struct tmo_timer *t)
{
	_Atomic uint64_t *word = lf_timer_word(t);
	uint64_t w = atomic_load_explicit(word, memory_order_acquire);
	if (LF_UNLIKELY(lf_word_out(w) != LF_PENDING))
		return cancel_slow(e, t, w);
	struct lf_node *n = lf_node_at(e, lf_word_idx(w));
	/* the arm's RING state is its word without the index */
	uint64_t s = w & ~((uint64_t)((1u << LF_IDX_BITS) - 1) << 2);
	if (LF_UNLIKELY(!atomic_compare_exchange_strong_explicit(&n->state, &s,
	                                                         s + (LF_CANCELLED - LF_RING),
	                                                         memory_order_acq_rel,
	                                                         memory_order_relaxed)))
		return cancel_slow(e, t, w);
	/* won: taken back before anyone else looked */
	atomic_store_explicit(word, w | LF_CANCELLED_OUT, memory_order_release);
	if (LF_UNLIKELY(tls_hot.id != e->base.id))
		return cancel_ring_other(e, w, n);
	struct lf_rec *r = tls_hot.rec;
	uint32_t k = (uint32_t)(atomic_load_explicit(&r->head, memory_order_relaxed) - 1) &
	             (LF_RING_SLOTS - 1);
	if (LF_UNLIKELY(atomic_load_explicit(&r->ring[k], memory_order_relaxed) != w))
		return cancel_ring_other(e, w, n);
	/* from our own ring: it never left this thread.  Its node goes back
	 * to the cache it came from unchecked: the cache is at most
	 * LF_CACHE_MAX after any other path, and only the arms still in the
	 * ring come back this way, so it never exceeds LF_CACHE_MAX +
	 * LF_RING_SLOTS. */
	atomic_store_explicit(&r->ring[k], 0, memory_order_relaxed);
	bump(&r->prevented);
	n->free_next = r->cache;
	r->cache = n;
	r->cache_n++;
	return TMO_CANCEL_PREVENTED;
}
