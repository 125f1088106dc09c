/*
 * The lock-free inbox core (see inbox.h for the design).
 *
 * Memory ordering, in one place:
 *  - A node's plain fields (timer, cb, arg, when) are published by the inbox
 *    push (a CK CAS, a full barrier on x86 and a builtin CAS under the TSan
 *    override) and read after the timer thread's exchange of the inbox head.
 *  - The node state word is a C11 atomic: cancel and fire CAS it (acq_rel);
 *    the timer thread releases a node with a release store of FREE, and the
 *    magazine stack carries that store to the next producer.
 *  - The timer's private words are C11 atomics written as a small seqlock:
 *    the outcome word (generation << 2 | outcome) is the sequence, so a
 *    cancel racing a re-arm from inside the callback never pairs one arm's
 *    node with another arm's generation.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <ck_pr.h>
#include <ck_stack.h>
/* ck_ec.h needs <time.h> first under strict C11. */
#include <ck_ec.h>

#include "inbox.h"

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- node state ---------------------------------------------------------- */

enum {
	ST_FREE = 0,
	ST_QUEUED = 1,
	ST_IN_STRUCT = 2,
	ST_FIRING = 3,
	ST_CANCELLED = 4,
	ST_CANCEL_PENDING = 5,
};
#define ST_BITS 3
#define ST_MASK UINT64_C(7)

static inline uint64_t mkst(uint64_t gen, unsigned st) { return gen << ST_BITS | st; }
static inline unsigned st_of(uint64_t s) { return (unsigned)(s & ST_MASK); }
static inline uint64_t gen_of(uint64_t s) { return s >> ST_BITS; }

/* ---- the timer's private words ------------------------------------------- */

enum { OUT_NONE = 0, OUT_PENDING = 1, OUT_FIRED = 2, OUT_CANCELLED = 3 };

/* Word 0 is the engine the timer was last armed on (NULL: never armed here
 * or anywhere), so a cancel through another engine is recognised. */
struct ib_priv {
	_Atomic(struct tmo *) eng;
	_Atomic(struct tmo__ib_node *) node;
	/* generation << 2 | OUT_*: written last by arm (release), by the winner
	 * of cancel vs fire, and by destroy for timers it cancels */
	_Atomic uint64_t outcome;
};
TMO__PRIV_FITS(struct ib_priv);

/* ---- futex-backed event counts ------------------------------------------- */

static int ec_gettime(const struct ck_ec_ops *ops, struct timespec *out)
{
	(void)ops;
	return clock_gettime(CLOCK_MONOTONIC, out);
}

/* ck_ec passes an ABSOLUTE CLOCK_MONOTONIC deadline: FUTEX_WAIT_BITSET takes
 * exactly that (plain FUTEX_WAIT would read it as relative). */
static void ec_wait32(const struct ck_ec_wait_state *st, const uint32_t *addr, uint32_t expect,
                      const struct timespec *deadline)
{
	(void)st;
	syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expect, deadline, NULL,
	        FUTEX_BITSET_MATCH_ANY);
}

static void ec_wake32(const struct ck_ec_ops *ops, const uint32_t *addr)
{
	(void)ops;
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static const struct ck_ec_ops ec_ops = {
	.gettime = ec_gettime,
	.wait32 = ec_wait32,
	.wake32 = ec_wake32,
};
/* Many threads increment both event counts. */
static const struct ck_ec_mode ec_mode = {.ops = &ec_ops, .single_producer = false};

/* ---- the engine ---------------------------------------------------------- */

#define SLAB_FIRST 1024u
#define SLAB_MAX (64u * 1024u)
/* Idle naps before the timer thread goes back to sleeping until woken. */
#define NAP_IDLE_MAX 4
/* Retry period for nodes the structure could not take (out of memory). */
#define UNFILED_RETRY_NS TMO_NSEC_PER_MSEC

struct slab {
	struct slab *next;
	uint32_t count;
	struct tmo__ib_node nodes[];
};

struct tls_slot;

struct tmo {
	struct tmo_base base;
	const struct tmo__ib_sched *sched;
	uint64_t id; /* never reused: keys thread-local caches */
	int64_t nap_ns;

	/* Producers write these; each on its own line. */
	_Alignas(64) ck_stack_t inbox;
	_Alignas(64) ck_stack_t free_mags;
	_Alignas(64) struct ck_ec32 wake_ec; /* producers -> timer thread */
	_Atomic int napping;                 /* 1: timer thread polls; no wake needed */
	_Alignas(64) struct ck_ec32 done_ec; /* timer thread -> waiting cancels */

	/* Timer thread only. */
	_Alignas(64) struct tmo__ib_node *fmag; /* partial magazine */
	uint32_t fmag_count;
	struct tmo__ib_node *unfiled;
	int idle_naps;
	int napping_cached;

	/* Written by the timer thread, read by stats. */
	_Atomic uint64_t fired;
	_Atomic uint64_t struct_bytes;
	_Atomic uint64_t filed;

	/* Pool growth (grow_lock). */
	pthread_mutex_t grow_lock;
	struct slab *slabs;
	uint32_t next_slab;
	_Atomic uint64_t nodes_total;
	_Atomic uint64_t slab_count;
	_Atomic uint64_t slab_bytes;

	/* g_lock: caches of threads that use this engine, and what departed
	 * caches counted. */
	struct tls_slot *slots;
	uint64_t armed_retired, prevented_retired;

	/* park / stop */
	pthread_mutex_t park_lock;
	pthread_cond_t park_cv;
	int park_req, parked;
	_Atomic int park_flag;
	_Atomic int stop;
	pthread_t thread;

	_Alignas(64) unsigned char sched_state[];
};

static inline void *S(struct tmo *e) { return e->sched_state; }

/* ---- thread-local caches --------------------------------------------------
 *
 * A thread keeps, per engine it uses, a chain of free nodes and two
 * counters.  The slot is keyed by the engine's id, which is never reused, so
 * a cache left behind by a destroyed engine is recognised and dropped without
 * touching its nodes (they died with the engine's slabs).  Engines list the
 * slots that name them (under g_lock) so stats can sum the counters and
 * destroy can mark them dead; a thread's exit returns its caches.
 */
struct tls_slot {
	_Atomic uint64_t id; /* 0: empty or its engine was destroyed */
	struct tmo *eng;
	struct tmo__ib_node *head;
	uint32_t count;
	_Atomic uint64_t armed;     /* written by the owner only */
	_Atomic uint64_t prevented; /* written by the owner only */
	struct tls_slot *next, **pprev; /* engine's list, under g_lock */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t g_next_id = 1;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;

static _Thread_local struct tls_slot tls_slots[TMO__IB_SLOTS];
static _Thread_local unsigned tls_victim;
static _Thread_local int tls_key_set;
/* The engine whose timer thread this is (cancel from a callback: SELF). */
static _Thread_local struct tmo *tls_timer_of;

static inline void bump(_Atomic uint64_t *c)
{
	/* single writer: a plain increment, atomic only so readers see no race */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

static void mags_push_chain(ck_stack_t *st, ck_stack_entry_t *first);

/* Give a live slot's nodes and counts back to its engine.  g_lock held. */
static void slot_detach_locked(struct tls_slot *s)
{
	if (atomic_load_explicit(&s->id, memory_order_relaxed) != 0) {
		struct tmo *e = s->eng;
		if (s->head != NULL) {
			s->head->mag_count = s->count;
			s->head->aux.mag.next = NULL;
			mags_push_chain(&e->free_mags, &s->head->aux.mag);
		}
		e->armed_retired += atomic_load_explicit(&s->armed, memory_order_relaxed);
		e->prevented_retired += atomic_load_explicit(&s->prevented, memory_order_relaxed);
		*s->pprev = s->next;
		if (s->next != NULL)
			s->next->pprev = s->pprev;
	}
	atomic_store_explicit(&s->id, 0, memory_order_relaxed);
	s->eng = NULL;
	s->head = NULL;
	s->count = 0;
}

static void tls_exit(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&g_lock);
	for (unsigned i = 0; i < TMO__IB_SLOTS; i++)
		slot_detach_locked(&tls_slots[i]);
	pthread_mutex_unlock(&g_lock);
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_key, tls_exit) == 0; }

static struct tls_slot *slot_attach(struct tmo *e)
{
	pthread_once(&g_key_once, key_init);
	pthread_mutex_lock(&g_lock);
	if (!tls_key_set && g_key_ok) {
		/* only to have tls_exit run at thread exit */
		tls_key_set = pthread_setspecific(g_key, &tls_slots[0]) == 0;
	}
	struct tls_slot *s = NULL;
	for (unsigned i = 0; i < TMO__IB_SLOTS && s == NULL; i++)
		if (atomic_load_explicit(&tls_slots[i].id, memory_order_relaxed) == 0)
			s = &tls_slots[i];
	if (s == NULL)
		s = &tls_slots[tls_victim++ % TMO__IB_SLOTS];
	slot_detach_locked(s); /* returns a victim's nodes; drops a dead one's */
	s->eng = e;
	atomic_store_explicit(&s->armed, 0, memory_order_relaxed);
	atomic_store_explicit(&s->prevented, 0, memory_order_relaxed);
	s->next = e->slots;
	if (s->next != NULL)
		s->next->pprev = &s->next;
	s->pprev = &e->slots;
	e->slots = s;
	atomic_store_explicit(&s->id, e->id, memory_order_relaxed);
	pthread_mutex_unlock(&g_lock);
	return s;
}

static inline struct tls_slot *slot_for(struct tmo *e)
{
	for (unsigned i = 0; i < TMO__IB_SLOTS; i++)
		if (atomic_load_explicit(&tls_slots[i].id, memory_order_relaxed) == e->id)
			return &tls_slots[i];
	return slot_attach(e);
}

/* ---- magazines ------------------------------------------------------------ */

/* Push a chain of magazine links (tail unknown) with no walk in the common
 * case: the stack is usually empty right after a producer took it all.  If
 * not, take what is there and walk that (short: it arrived in the window). */
static void mags_push_chain(ck_stack_t *st, ck_stack_entry_t *first)
{
	for (;;) {
		if (ck_pr_cas_ptr(&st->head, NULL, first))
			return;
		ck_stack_entry_t *other = ck_stack_batch_pop_upmc(st);
		if (other == NULL)
			continue;
		ck_stack_entry_t *tail = other;
		while (tail->next != NULL)
			tail = tail->next;
		tail->next = first;
		first = other;
	}
}

/* Take one magazine into the cache.  Returns 0 if the stack was empty. */
static int cache_take_mag(struct tmo *e, struct tls_slot *s)
{
	ck_stack_entry_t *m = ck_stack_batch_pop_upmc(&e->free_mags);
	if (m == NULL)
		return 0;
	ck_stack_entry_t *rest = m->next;
	if (rest != NULL)
		mags_push_chain(&e->free_mags, rest);
	struct tmo__ib_node *h = tmo_container_of(m, struct tmo__ib_node, aux.mag);
	s->head = h;
	s->count = h->mag_count;
	return 1;
}

/* Chain n[0..count) into magazines; the first `keep` go to the cache. */
static void slab_distribute(struct tmo *e, struct slab *sl, struct tls_slot *s, uint32_t keep)
{
	ck_stack_entry_t *mags = NULL;
	uint32_t i = 0;
	if (keep > sl->count)
		keep = sl->count;
	if (keep > 0) {
		for (uint32_t j = 0; j < keep; j++)
			sl->nodes[j].link.next = j + 1 < keep ? &sl->nodes[j + 1].link : NULL;
		s->head = &sl->nodes[0];
		s->count = keep;
		i = keep;
	}
	while (i < sl->count) {
		uint32_t n = sl->count - i < TMO__IB_MAG ? sl->count - i : TMO__IB_MAG;
		for (uint32_t j = 0; j < n; j++)
			sl->nodes[i + j].link.next = j + 1 < n ? &sl->nodes[i + j + 1].link : NULL;
		sl->nodes[i].mag_count = n;
		sl->nodes[i].aux.mag.next = mags;
		mags = &sl->nodes[i].aux.mag;
		i += n;
	}
	if (mags != NULL)
		mags_push_chain(&e->free_mags, mags);
}

/* Allocate a slab (grow_lock held). */
static int slab_add(struct tmo *e, struct tls_slot *s, uint32_t keep)
{
	uint32_t count = e->next_slab;
	size_t bytes = sizeof(struct slab) + (size_t)count * sizeof(struct tmo__ib_node);
	struct slab *sl = tmo__aligned_alloc(64, bytes);
	if (sl == NULL)
		return TMO_ENOMEM;
	memset(sl, 0, bytes);
	sl->count = count;
	for (uint32_t i = 0; i < count; i++)
		atomic_init(&sl->nodes[i].state, mkst(0, ST_FREE));
	sl->next = e->slabs;
	e->slabs = sl;
	/* double the pool each time, up to SLAB_MAX per slab: growth is rare */
	e->next_slab = count * 2 > SLAB_MAX ? SLAB_MAX : count * 2;
	atomic_fetch_add_explicit(&e->nodes_total, count, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->slab_count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->slab_bytes, bytes, memory_order_relaxed);
	slab_distribute(e, sl, s, keep);
	return 0;
}

/* Slow path of arm: the cache is empty. */
static int cache_refill(struct tmo *e, struct tls_slot *s)
{
	if (cache_take_mag(e, s))
		return 0;
	pthread_mutex_lock(&e->grow_lock);
	/* another producer may have pushed back a remainder meanwhile */
	int rc = cache_take_mag(e, s) ? 0 : slab_add(e, s, TMO__IB_MAG);
	pthread_mutex_unlock(&e->grow_lock);
	return rc;
}

/* Timer thread: a node is released (fired, or its cancel was seen). */
static void node_release(struct tmo *e, struct tmo__ib_node *n, uint64_t gen)
{
	atomic_store_explicit(&n->state, mkst(gen, ST_FREE), memory_order_release);
	n->where = TMO__IB_NOWHERE;
	n->link.next = e->fmag != NULL ? &e->fmag->link : NULL;
	e->fmag = n;
	if (++e->fmag_count == TMO__IB_MAG) {
		n->mag_count = TMO__IB_MAG;
		ck_stack_push_upmc(&e->free_mags, &n->aux.mag);
		e->fmag = NULL;
		e->fmag_count = 0;
	}
}

/* ---- inbox ---------------------------------------------------------------- */

/* ck_stack_push_upmc, but also says whether the inbox was empty: only then
 * may the timer thread be asleep without knowing of work. */
static inline int inbox_push(ck_stack_t *st, ck_stack_entry_t *ent)
{
	ck_stack_entry_t *head = ck_pr_load_ptr(&st->head);
	for (;;) {
		ent->next = head;
		ck_pr_fence_store();
		if (ck_pr_cas_ptr_value(&st->head, head, ent, &head))
			return head == NULL;
	}
}

static inline void inbox_post(struct tmo *e, struct tmo__ib_node *n)
{
	/* seq_cst load after the CAS: pairs with the timer thread's
	 * "napping = 0; fence; look at the inbox" before it sleeps */
	if (inbox_push(&e->inbox, &n->link) &&
	    !atomic_load_explicit(&e->napping, memory_order_seq_cst))
		ck_ec32_add(&e->wake_ec, &ec_mode, 1);
}

/* ---- arm / cancel --------------------------------------------------------- */

int tmo__ib_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                void *arg)
{
	struct ib_priv *p = TMO__PRIV(struct ib_priv, t);
	if (atomic_load_explicit(&p->eng, memory_order_relaxed) == e &&
	    (atomic_load_explicit(&p->outcome, memory_order_acquire) & 3) == OUT_PENDING)
		return TMO_EARMED;

	struct tls_slot *s = slot_for(e);
	if (UNLIKELY(s->head == NULL)) {
		int rc = cache_refill(e, s);
		if (rc != 0)
			return rc;
	}
	struct tmo__ib_node *n = s->head;
	s->head = (struct tmo__ib_node *)(void *)n->link.next;
	s->count--;

	uint64_t gen = gen_of(atomic_load_explicit(&n->state, memory_order_relaxed)) + 1;
	n->timer = t;
	n->cb = cb;
	n->arg = arg;
	n->when = timeout_ns;
	atomic_store_explicit(&n->state, mkst(gen, ST_QUEUED), memory_order_relaxed);
	t->cb = cb;
	t->arg = arg;
	/* Seqlock write: the fence orders these after whatever outcome the
	 * previous arm ended with (FIRED, CANCELLED), so a cancel that reads our
	 * node or engine also reads a changed outcome and retries. */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&p->eng, e, memory_order_relaxed);
	atomic_store_explicit(&p->node, n, memory_order_relaxed);
	/* before the push: once pushed, the timer thread may write FIRED */
	atomic_store_explicit(&p->outcome, gen << 2 | OUT_PENDING, memory_order_release);
	bump(&s->armed);
	inbox_post(e, n);
	return 0;
}

static void count_prevented(struct tmo *e) { bump(&slot_for(e)->prevented); }

/* Wait until the callback of (n, gen) has returned. */
static void wait_callback(struct tmo *e, struct tmo__ib_node *n, uint64_t gen)
{
	for (;;) {
		uint32_t v = ck_ec32_value(&e->done_ec);
		if (atomic_load_explicit(&n->state, memory_order_acquire) != mkst(gen, ST_FIRING))
			return;
		ck_ec32_wait(&e->done_ec, &ec_mode, v, NULL);
	}
}

int tmo__ib_cancel(struct tmo *e, struct tmo_timer *t)
{
	struct ib_priv *p = TMO__PRIV(struct ib_priv, t);
	int waited = 0;
	for (;;) {
		/* seqlock read of (outcome, engine, node) */
		uint64_t o = atomic_load_explicit(&p->outcome, memory_order_acquire);
		struct tmo *pe = atomic_load_explicit(&p->eng, memory_order_relaxed);
		struct tmo__ib_node *n = atomic_load_explicit(&p->node, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&p->outcome, memory_order_relaxed) != o)
			continue;
		if (pe == NULL || (o & 3) == OUT_NONE)
			return TMO_ENOTARMED;
		if (pe != e)
			return TMO_EWRONGENGINE;
		uint64_t gen = o >> 2;
		if ((o & 3) == OUT_CANCELLED)
			return waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;

		if ((o & 3) == OUT_PENDING) {
			uint64_t s = mkst(gen, ST_QUEUED);
			if (atomic_compare_exchange_strong_explicit(&n->state, &s,
			                                            mkst(gen, ST_CANCELLED),
			                                            memory_order_acq_rel,
			                                            memory_order_acquire)) {
				/* still in the inbox: the timer thread drops it when it
				 * pops it, no message needed */
				count_prevented(e);
				atomic_store_explicit(&p->outcome, gen << 2 | OUT_CANCELLED,
				                      memory_order_release);
				return TMO_CANCEL_PREVENTED;
			}
			if (s == mkst(gen, ST_IN_STRUCT) &&
			    atomic_compare_exchange_strong_explicit(&n->state, &s,
			                                            mkst(gen, ST_CANCEL_PENDING),
			                                            memory_order_acq_rel,
			                                            memory_order_acquire)) {
				count_prevented(e);
				atomic_store_explicit(&p->outcome, gen << 2 | OUT_CANCELLED,
				                      memory_order_release);
				/* Its inbox link is free while it sits in the structure:
				 * send it back so the timer thread removes it now, not at
				 * its deadline.  Last: the node may be recycled at once. */
				inbox_post(e, n);
				return TMO_CANCEL_PREVENTED;
			}
			if (s == mkst(gen, ST_CANCELLED) || s == mkst(gen, ST_CANCEL_PENDING))
				return TMO_ENOTARMED; /* a concurrent cancel won */
			if (s != mkst(gen, ST_FIRING)) {
				/* The node moved on (released, maybe re-armed), so this
				 * arm was resolved.  Fire writes FIRED before it releases
				 * the node; an unchanged PENDING means a concurrent cancel
				 * won and has not yet recorded it. */
				if (atomic_load_explicit(&p->outcome, memory_order_acquire) == o)
					return TMO_ENOTARMED;
				continue;
			}
			/* FIRING: fall through to the wait */
		}

		/* Fired (or firing). */
		if (atomic_load_explicit(&n->state, memory_order_acquire) == mkst(gen, ST_FIRING)) {
			if (tls_timer_of == e)
				return TMO_CANCEL_SELF; /* one callback at a time: ours */
			wait_callback(e, n, gen);
			waited = 1;
			/* the callback may have re-armed the timer: cancel that arm */
			uint64_t o2 = atomic_load_explicit(&p->outcome, memory_order_acquire);
			if ((o2 & 3) == OUT_PENDING && o2 != o)
				continue;
			return TMO_CANCEL_WAITED;
		}
		if ((o & 3) == OUT_PENDING)
			continue; /* FIRING ended between the two loads: re-read */
		return waited ? TMO_CANCEL_WAITED : TMO_CANCEL_FIRED;
	}
}

/* ---- the timer thread ----------------------------------------------------- */

static void drain(struct tmo *e, ck_stack_entry_t *chain, int64_t now)
{
	/* The exchange hands the chain newest-first: reverse it, so a cancel's
	 * push is handled after the arm it cancels. */
	ck_stack_entry_t *rev = NULL;
	while (chain != NULL) {
		ck_stack_entry_t *next = chain->next;
		chain->next = rev;
		rev = chain;
		chain = next;
	}
	while (rev != NULL) {
		struct tmo__ib_node *n = tmo_container_of(rev, struct tmo__ib_node, link);
		/* read the link first: once the node is IN_STRUCT a cancel may
		 * push it again, rewriting it */
		rev = rev->next;
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		uint64_t gen = gen_of(s);
		switch (st_of(s)) {
		case ST_QUEUED: {
			int64_t deadline = now + n->when; /* both <= 2^62: no overflow */
			if (!atomic_compare_exchange_strong_explicit(&n->state, &s,
			                                             mkst(gen, ST_IN_STRUCT),
			                                             memory_order_acq_rel,
			                                             memory_order_acquire)) {
				node_release(e, n, gen); /* cancelled meanwhile */
				break;
			}
			n->when = deadline;
			if (e->sched->insert(S(e), n, deadline) == 0) {
				n->where = TMO__IB_IN_STRUCT;
			} else {
				n->where = TMO__IB_UNFILED;
				n->aux.next = e->unfiled;
				e->unfiled = n;
			}
			break;
		}
		case ST_CANCELLED:
			node_release(e, n, gen);
			break;
		case ST_CANCEL_PENDING:
			if (n->where == TMO__IB_IN_STRUCT) {
				e->sched->remove(S(e), n);
				node_release(e, n, gen);
			} else if (n->where == TMO__IB_UNFILED) {
				n->where = TMO__IB_DROP; /* released by the retry pass */
			} else {
				node_release(e, n, gen); /* was already collected as due */
			}
			break;
		default:
			/* FREE / IN_STRUCT / FIRING nodes are never in the inbox */
			abort();
		}
	}
}

/* Retry nodes the structure could not take; due ones go straight to due. */
static void retry_unfiled(struct tmo *e, int64_t now, struct tmo__ib_node ***tail)
{
	struct tmo__ib_node *n = e->unfiled, *keep = NULL;
	e->unfiled = NULL;
	while (n != NULL) {
		struct tmo__ib_node *next = n->aux.next;
		if (n->where == TMO__IB_DROP) {
			node_release(e, n, gen_of(atomic_load_explicit(&n->state,
			                                               memory_order_relaxed)));
		} else if (n->when <= now) {
			n->where = TMO__IB_NOWHERE;
			n->aux.next = NULL;
			**tail = n;
			*tail = &n->aux.next;
		} else if (e->sched->insert(S(e), n, n->when) == 0) {
			n->where = TMO__IB_IN_STRUCT;
		} else {
			n->aux.next = keep;
			keep = n;
		}
		n = next;
	}
	e->unfiled = keep;
}

static void fire_due(struct tmo *e, struct tmo__ib_node *n)
{
	while (n != NULL) {
		struct tmo__ib_node *next = n->aux.next;
		n->where = TMO__IB_NOWHERE;
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		uint64_t gen = gen_of(s);
		/* CANCEL_PENDING: its cancel won and pushed it; the inbox
		 * delivers it next round and releases it then */
		if (st_of(s) == ST_IN_STRUCT &&
		    atomic_compare_exchange_strong_explicit(&n->state, &s, mkst(gen, ST_FIRING),
		                                            memory_order_acq_rel,
		                                            memory_order_acquire)) {
			struct tmo_timer *t = n->timer;
			struct ib_priv *p = TMO__PRIV(struct ib_priv, t);
			/* before the callback: it may free or re-arm the timer */
			atomic_store_explicit(&p->outcome, gen << 2 | OUT_FIRED, memory_order_release);
			/* seqlock: a re-arm inside the callback writes after this */
			atomic_thread_fence(memory_order_release);
			bump(&e->fired);
			n->cb(t, n->arg);
			node_release(e, n, gen);
			/* after the release store: a cancel waiting on FIRING wakes */
			ck_ec32_add(&e->done_ec, &ec_mode, 1);
		}
		n = next;
	}
}

static void park_hook(struct tmo *e)
{
	pthread_mutex_lock(&e->park_lock);
	if (e->park_req) {
		e->parked = 1;
		pthread_cond_broadcast(&e->park_cv);
		while (e->park_req && !atomic_load(&e->stop))
			pthread_cond_wait(&e->park_cv, &e->park_lock);
		e->parked = 0;
	}
	pthread_mutex_unlock(&e->park_lock);
}

static void *timer_main(void *arg)
{
	struct tmo *e = arg;
	tls_timer_of = e;
	for (;;) {
		if (UNLIKELY(atomic_load_explicit(&e->park_flag, memory_order_acquire)))
			park_hook(e);
		if (UNLIKELY(atomic_load_explicit(&e->stop, memory_order_acquire)))
			break;

		ck_stack_entry_t *batch = ck_stack_batch_pop_upmc(&e->inbox);
		/* read after the exchange: deadline = now + timeout is then no
		 * earlier than any popped arm's call time + its timeout */
		int64_t now = tmo_now_ns();
		if (batch != NULL)
			drain(e, batch, now);

		struct tmo__ib_node *due = NULL, **tail = &due;
		if (e->unfiled != NULL)
			retry_unfiled(e, now, &tail);
		e->sched->collect(S(e), now, &tail);
		*tail = NULL;
		atomic_store_explicit(&e->filed, e->sched->count(S(e)), memory_order_relaxed);
		atomic_store_explicit(&e->struct_bytes, e->sched->bytes(S(e)), memory_order_relaxed);
		if (due != NULL) {
			fire_due(e, due);
			continue; /* callbacks took time: look again before sleeping */
		}

		int64_t wake_at = e->sched->next_deadline(S(e));
		if (e->unfiled != NULL && wake_at - now > UNFILED_RETRY_NS)
			wake_at = now + UNFILED_RETRY_NS;
		int nap = 0;
		if (e->nap_ns > 0) {
			if (batch != NULL)
				e->idle_naps = 0;
			else if (e->idle_naps < NAP_IDLE_MAX)
				e->idle_naps++;
			if (e->idle_naps < NAP_IDLE_MAX) {
				nap = 1;
				if (wake_at - now > e->nap_ns)
					wake_at = now + e->nap_ns;
			}
		}
		if (nap != e->napping_cached) {
			atomic_store_explicit(&e->napping, nap, memory_order_seq_cst);
			e->napping_cached = nap;
		}
		uint32_t v = ck_ec32_value(&e->wake_ec);
		/* Dekker with inbox_post: napping = 0 is visible before we look at
		 * the inbox, or the producer's push is visible to us. */
		atomic_thread_fence(memory_order_seq_cst);
		if (ck_pr_load_ptr(&e->inbox.head) != NULL)
			continue;
		if (atomic_load_explicit(&e->park_flag, memory_order_acquire) ||
		    atomic_load_explicit(&e->stop, memory_order_acquire))
			continue;
		if (wake_at == INT64_MAX) {
			ck_ec32_wait(&e->wake_ec, &ec_mode, v, NULL);
		} else {
			struct timespec ts = tmo__ts_from_ns(wake_at);
			ck_ec32_wait(&e->wake_ec, &ec_mode, v, &ts);
		}
	}
	return NULL;
}

static void wake_timer(struct tmo *e) { ck_ec32_add(&e->wake_ec, &ec_mode, 1); }

/* ---- create / destroy ------------------------------------------------------ */

static void free_slabs(struct tmo *e)
{
	while (e->slabs != NULL) {
		struct slab *sl = e->slabs;
		e->slabs = sl->next;
		tmo__free(sl);
	}
}

int tmo__ib_create(const struct tmo__ib_params *p, const struct tmo_config *cfg,
                   struct tmo **out)
{
	int64_t res = cfg->resolution_ns > 0 ? cfg->resolution_ns : p->resolution_ns;
	struct tmo *e = tmo__aligned_alloc(64, sizeof *e + p->sched->size);
	if (e == NULL)
		return TMO_ENOMEM;
	memset(e, 0, sizeof *e + p->sched->size);
	e->base.ops = p->ops;
	e->sched = p->sched;
	e->id = atomic_fetch_add(&g_next_id, 1);
	/* a configured wheel tick also sets how often it polls */
	e->nap_ns = p->nap_ns > 0 && cfg->resolution_ns > 0 ? res : p->nap_ns;
	ck_stack_init(&e->inbox);
	ck_stack_init(&e->free_mags);
	ck_ec32_init(&e->wake_ec, 0);
	ck_ec32_init(&e->done_ec, 0);
	e->next_slab = SLAB_FIRST;

	int rc = TMO_ESYS;
	if (pthread_mutex_init(&e->grow_lock, NULL) != 0)
		goto fail_free;
	if (pthread_mutex_init(&e->park_lock, NULL) != 0)
		goto fail_grow;
	if (pthread_cond_init(&e->park_cv, NULL) != 0)
		goto fail_park;
	rc = e->sched->init(S(e), res, tmo_now_ns());
	if (rc != 0)
		goto fail_cv;
	rc = slab_add(e, NULL, 0);
	if (rc != 0)
		goto fail_sched;
	rc = tmo__thread_create(&e->thread, NULL, timer_main, e);
	if (rc != 0)
		goto fail_slabs;
	*out = e;
	return 0;

fail_slabs:
	free_slabs(e);
fail_sched:
	e->sched->fini(S(e));
fail_cv:
	pthread_cond_destroy(&e->park_cv);
fail_park:
	pthread_mutex_destroy(&e->park_lock);
fail_grow:
	pthread_mutex_destroy(&e->grow_lock);
fail_free:
	tmo__free(e);
	return rc;
}

void tmo__ib_destroy(struct tmo *e)
{
	atomic_store_explicit(&e->stop, 1, memory_order_release);
	pthread_mutex_lock(&e->park_lock);
	pthread_cond_broadcast(&e->park_cv);
	pthread_mutex_unlock(&e->park_lock);
	wake_timer(e);
	pthread_join(e->thread, NULL);

	/* No arm or cancel runs now (the contract).  Every arm still QUEUED or
	 * filed is cancelled: record it in its timer so the timer reads as idle
	 * (it may be armed again elsewhere). */
	for (struct slab *sl = e->slabs; sl != NULL; sl = sl->next) {
		for (uint32_t i = 0; i < sl->count; i++) {
			struct tmo__ib_node *n = &sl->nodes[i];
			uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
			if (st_of(s) == ST_QUEUED || st_of(s) == ST_IN_STRUCT) {
				struct ib_priv *p = TMO__PRIV(struct ib_priv, n->timer);
				atomic_store_explicit(&p->outcome, gen_of(s) << 2 | OUT_CANCELLED,
				                      memory_order_release);
			}
		}
	}

	/* Caches still naming this engine die with it: mark them dead (their
	 * owners drop them without touching the nodes). */
	pthread_mutex_lock(&g_lock);
	while (e->slots != NULL) {
		struct tls_slot *s = e->slots;
		e->slots = s->next;
		atomic_store_explicit(&s->id, 0, memory_order_relaxed);
	}
	pthread_mutex_unlock(&g_lock);

	e->sched->fini(S(e));
	free_slabs(e);
	pthread_cond_destroy(&e->park_cv);
	pthread_mutex_destroy(&e->park_lock);
	pthread_mutex_destroy(&e->grow_lock);
	tmo__free(e);
}

/* ---- stats, park, debug ----------------------------------------------------- */

int tmo__ib_stats(struct tmo *e, struct tmo_stats *out)
{
	uint64_t armed, prevented;
	pthread_mutex_lock(&g_lock);
	armed = e->armed_retired;
	prevented = e->prevented_retired;
	for (struct tls_slot *s = e->slots; s != NULL; s = s->next) {
		armed += atomic_load_explicit(&s->armed, memory_order_relaxed);
		prevented += atomic_load_explicit(&s->prevented, memory_order_relaxed);
	}
	pthread_mutex_unlock(&g_lock);
	uint64_t fired = atomic_load_explicit(&e->fired, memory_order_relaxed);
	out->pending = armed > fired + prevented ? armed - fired - prevented : 0;
	out->held_nodes = atomic_load_explicit(&e->nodes_total, memory_order_relaxed);
	out->held_bytes = atomic_load_explicit(&e->slab_bytes, memory_order_relaxed) +
	                  atomic_load_explicit(&e->struct_bytes, memory_order_relaxed);
	out->threads = 1;
	out->fired = fired;
	out->cancelled = prevented;
	return 0;
}

int tmo__ib_park(struct tmo *e, int on)
{
	pthread_mutex_lock(&e->park_lock);
	if (on) {
		e->park_req = 1;
		atomic_store_explicit(&e->park_flag, 1, memory_order_release);
		wake_timer(e);
		while (!e->parked)
			pthread_cond_wait(&e->park_cv, &e->park_lock);
	} else {
		e->park_req = 0;
		atomic_store_explicit(&e->park_flag, 0, memory_order_release);
		pthread_cond_broadcast(&e->park_cv);
	}
	pthread_mutex_unlock(&e->park_lock);
	return 0;
}

void *tmo__ib_timer_node(const struct tmo_timer *t, uint64_t *gen)
{
	const struct ib_priv *p = (const struct ib_priv *)(const void *)t->tmo_private;
	uint64_t o = atomic_load_explicit(&p->outcome, memory_order_acquire);
	if (gen != NULL)
		*gen = o >> 2;
	return atomic_load_explicit(&p->node, memory_order_relaxed);
}

void tmo__ib_debug(struct tmo *e, struct tmo__ib_debug *out)
{
	out->filed = atomic_load_explicit(&e->filed, memory_order_relaxed);
	out->slabs = atomic_load_explicit(&e->slab_count, memory_order_relaxed);
	out->cache_count = 0;
	for (unsigned i = 0; i < TMO__IB_SLOTS; i++)
		if (atomic_load_explicit(&tls_slots[i].id, memory_order_relaxed) == e->id)
			out->cache_count = tls_slots[i].count;
}
