/*
 * What the timer thread takes (timer.c steals and drains it): filing a
 * node it holds in transit into its own base, and holding a far arm
 * unfiled until its sweep (lf.h has the design; fire.c collects and
 * fires what is filed).
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "pool.h"
#include "depot.h"
#include "base.h"
#include "fire.h"
#include "take.h"
#include "hook.h"

/* How far ahead of the far arm it looks at the sweep fetches nodes. */
#define TAKE_AHEAD 16

/* ---- filing (timer thread) -------------------------------------------------------- */

/* A QUEUED node we hold goes into our base (or waits on `unfiled`). */
void tmo__lf_file_tt(struct tmo *e, struct lf_node *n, uint64_t gen, int64_t deadline)
{
	const struct lf_sched *sc = e->p->sched;
	atomic_store_explicit(&n->aux, LF_IN_TT, memory_order_relaxed);
	if (sc->insert(lf_sched_of(e->tt_base), n, deadline) != 0) {
		n->s.unfiled.when = deadline;
		n->free_next = e->tt->unfiled; /* QUEUED: its link is ours */
		e->tt->unfiled = n;
		return;
	}
	uint64_t s = lf_st(gen, LF_QUEUED);
	if (!atomic_compare_exchange_strong_explicit(&n->state, &s, lf_st(gen, LF_IN_STRUCT),
	                                             memory_order_acq_rel, memory_order_acquire)) {
		sc->remove(lf_sched_of(e->tt_base), n); /* cancelled on the way */
		lf_cache_put(e, e->tt_rec, n);
	}
}

void tmo__lf_retry_unfiled(struct tmo *e)
{
	struct lf_node *n = e->tt->unfiled;
	e->tt->unfiled = NULL;
	while (n != NULL) {
		struct lf_node *next = n->free_next;
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		if (lf_st_of(s) == LF_DROPPED)
			lf_cache_put(e, e->tt_rec, n);
		else
			tmo__lf_file_tt(e, n, lf_gen_of(s), n->s.unfiled.when);
		n = next;
	}
}

/* ---- far arms (timer thread) ------------------------------------------------------- */

/* Far arms.  A held timeout is most often cancelled long before it is due
 * (a request's timeout, held for the request): filed in the timer
 * thread's heap, its pair costs the heap's insert, a trip through the
 * base's cancel stack and the heap's removal from the middle, all on the
 * one timer thread (mpsc, held 1 ms: 1.8x the heap alone, half condvar's
 * pairs/s).  So an arm the drain or a steal takes whose deadline lies
 * more than FAR_MIN_NS ahead stays QUEUED, in the timer thread's hands
 * (an entry in tt->far[0]): its cancel is one CAS (QUEUED -> DROPPED) and
 * nothing more, on a line the timer thread never fetched when the arm
 * came through its owner's queue.  Every FAR_SWEEP_NS the sweep frees what was dropped in
 * far[1] and files the rest, and far[0] becomes far[1]: an arm waits one
 * to two sweeps, a held timer cancelled within one never meets a base.
 * Every far arm is filed before it is due: FAR_MIN_NS is more than two
 * sweeps and FAR_SOON_NS; a late timer thread (starved) files every far
 * arm, before it collects, once one is due within FAR_SOON_NS of the
 * round's `now`, so order holds (timer.c, Order: a far arm is in
 * transit, held by the timer thread itself).  A far arm is dated when it
 * is taken (or by its owner, mpsc's queue: arm.c file_inbox), from the
 * pair its stamp was made under; its entry keeps that deadline.  Parked, it files them all (the
 * fuzzer's audit then finds no dropped node held).  Past FAR_MAX entries
 * in a list, or out of memory for one, an arm is filed at once. */
#define FAR_SWEEP_NS (4 * TMO_NSEC_PER_MSEC)
#define FAR_MIN_NS (20 * TMO_NSEC_PER_MSEC)
#define FAR_SOON_NS (2 * TMO_NSEC_PER_MSEC)
#define FAR_FIRST 256u
#define FAR_MAX 65536u
_Static_assert(FAR_MIN_NS > 2 * FAR_SWEEP_NS + FAR_SOON_NS, "far arms are filed before due");

static inline void far_held_set(struct tmo *e)
{
	atomic_store_explicit(&e->far_held, e->tt->far[0].n + e->tt->far[1].n,
	                      memory_order_relaxed);
}

/* Room for one more entry in l: 0 when it may not grow. */
static int far_room(struct tmo *e, struct far_list *l)
{
	if (l->n < l->cap)
		return 1;
	if (l->cap >= FAR_MAX)
		return 0;
	size_t cap = l->cap != 0 ? 2 * l->cap : FAR_FIRST;
	/* under mem_lock: a fork copies no half-made swap (lf.h) */
	pthread_mutex_lock(&e->mem_lock);
	struct far *v = tmo__malloc(cap * sizeof *v);
	if (v != NULL) {
		LF_HOOK(mem, e);
		if (l->n != 0)
			memcpy(v, l->v, l->n * sizeof *v);
		tmo__free(l->v);
		l->v = v;
		l->cap = cap;
	}
	pthread_mutex_unlock(&e->mem_lock);
	if (v == NULL)
		return 0;
	tmo__lf_tt_bytes_update(e);
	return 1;
}

/* Hold a QUEUED node, dated `deadline`, as a far arm if that lies more
 * than FAR_MIN_NS past `now`.  Returns 0 when it is not far or finds no
 * room: the caller files it. */
int tmo__lf_far_hold(struct tmo *e, struct lf_node *n, int64_t deadline, int64_t now)
{
	struct lf_tt *tt = e->tt;
	struct far_list *l = &tt->far[0];
	if (deadline - now <= FAR_MIN_NS || !far_room(e, l))
		return 0;
	if (l->n == 0 || deadline < l->min)
		l->min = deadline;
	l->v[l->n++] = (struct far){n, deadline};
	far_held_set(e);
	if (tt->far_sweep_at == 0)
		tt->far_sweep_at = now + FAR_SWEEP_NS;
	return 1;
}

void tmo__lf_take_node(struct tmo *e, struct lf_node *n, uint64_t s, int64_t now, int64_t later)
{
	if (lf_st_of(s) != LF_QUEUED) { /* DROPPED on the way */
		lf_cache_put(e, e->tt_rec, n);
		lf_bump(&e->tt->dropped);
		return;
	}
	int64_t deadline = tmo__lf_node_deadline(e, n, later);
	if (deadline - now > FAR_MIN_NS) {
		/* dated now, from the pair its stamp was made under: by the
		 * sweep that files it that pair may be gone, and only a clock
		 * read would cap the stamp (late: unit/lf_dating) */
		atomic_store_explicit(&n->s.q.timeout, deadline, memory_order_relaxed);
		atomic_store_explicit(&n->s.q.stamp, LF_STAMP_DEADLINE, memory_order_relaxed);
		if (tmo__lf_far_hold(e, n, deadline, now))
			return;
	}
	tmo__lf_file_tt(e, n, lf_gen_of(s), deadline);
}

/* Free what was dropped in l, file the rest; l is empty after. */
static void far_file(struct tmo *e, struct far_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		struct far *f = &l->v[i];
		if (i + TAKE_AHEAD < l->n)
			__builtin_prefetch(l->v[i + TAKE_AHEAD].n, 1);
		/* acquire: the cancel's DROPPED, and the node ours to free; the
		 * generation is the arm's: a node in transit moves on only when
		 * its holder (we) frees it */
		uint64_t s = atomic_load_explicit(&f->n->state, memory_order_acquire);
		if (lf_st_of(s) == LF_QUEUED)
			tmo__lf_file_tt(e, f->n, lf_gen_of(s), f->deadline); /* a cancel may still drop it */
		else
			tmo__lf_take_node(e, f->n, s, 0, 0);
	}
	l->n = 0;
	far_held_set(e);
}

/* Every far arm filed or freed. */
void tmo__lf_far_file_all(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	far_file(e, &tt->far[1]);
	far_file(e, &tt->far[0]);
	tt->far_sweep_at = 0;
}

/* Each round, while far arms are held (far_sweep_at != 0), before it
 * collects. */
void tmo__lf_far_round(struct tmo *e, int64_t now)
{
	struct lf_tt *tt = e->tt;
	int64_t min = INT64_MAX;
	for (int i = 0; i < 2; i++)
		if (tt->far[i].n != 0 && tt->far[i].min < min)
			min = tt->far[i].min;
	if (min - now <= FAR_SOON_NS) { /* late: file before collecting */
		tmo__lf_far_file_all(e);
		return;
	}
	if (now < tt->far_sweep_at)
		return;
	far_file(e, &tt->far[1]);
	struct far_list young = tt->far[0];
	tt->far[0] = tt->far[1];
	tt->far[1] = young;
	tt->far_sweep_at = young.n != 0 ? now + FAR_SWEEP_NS : 0;
}

/* A long sleep ahead, none held: the lists' memory goes back. */
void tmo__lf_far_shrink(struct tmo *e)
{
	struct lf_tt *tt = e->tt;
	if (tt->far_sweep_at != 0 || (tt->far[0].cap == 0 && tt->far[1].cap == 0))
		return;
	pthread_mutex_lock(&e->mem_lock);
	for (int i = 0; i < 2; i++) {
		tmo__free(tt->far[i].v);
		tt->far[i] = (struct far_list){NULL, 0, 0, INT64_MAX};
	}
	pthread_mutex_unlock(&e->mem_lock);
	tmo__lf_tt_bytes_update(e);
}
