/*
 * The records behind arm and cancel: one per thread that uses an engine,
 * found through a thread-local pointer (the hot one, and a few more);
 * attached on a thread's first arm, detached at its exit or when it uses
 * too many engines (lf.h has the design).
 */
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "depot.h"
#include "base.h"
#include "rec.h"
#include "hook.h"

/* Engines a thread keeps a record for besides the hot one; using more
 * detaches the least recently used (its record stays with the engine). */
#define TLS_MORE 4

_Thread_local struct lf_tls_ent tmo__lf_tls_hot LF_TLS_IE;
static _Thread_local struct lf_tls_ent tls_more[TLS_MORE];
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

/*
 * Fork.  A child inherits the library as the forking thread's prepare
 * handler left it: every engine's allocations reachable from the engine,
 * so that destroy in the child (engine.c) frees exactly them.  The handler
 * takes, engine by engine, each lock under which a thread allocates or
 * frees and then publishes or unlinks: rec_lock (a record attached), the
 * pool's grow_lock (a run given back taken over) and mem_lock (the timer
 * thread's windows, lf.h).  Order: g_lock, then each engine's rec_lock,
 * grow_lock, mem_lock; no thread takes them in another order, and none
 * holds one across a callback, so a callback may fork.
 */
static void fork_prepare(void)
{
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < g_len; i++) {
		struct tmo *e = g_engines[i];
		pthread_mutex_lock(&e->rec_lock);
		pthread_mutex_lock(&e->pool.grow_lock);
#ifndef TMO_LF_PLANT_FORK_MEM
		if (pthread_mutex_trylock(&e->mem_lock) != 0) {
			LF_HOOK(fork_wait, e);
			pthread_mutex_lock(&e->mem_lock);
		}
#endif
	}
}

static void fork_after(void)
{
	for (size_t i = g_len; i-- > 0;) {
		struct tmo *e = g_engines[i];
#ifndef TMO_LF_PLANT_FORK_MEM
		pthread_mutex_unlock(&e->mem_lock);
#endif
		pthread_mutex_unlock(&e->pool.grow_lock);
		pthread_mutex_unlock(&e->rec_lock);
	}
	pthread_mutex_unlock(&g_lock);
}
static void once_init(void)
{
	g_key_ok = pthread_key_create(&g_key, tls_exit) == 0;
	pthread_atfork(fork_prepare, fork_after, fork_after);
}

void tmo__lf_engine_register(struct tmo *e)
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

void tmo__lf_engine_unregister(struct tmo *e)
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

static struct lf_rec *rec_new(struct tmo *e)
{
	struct lf_rec *r = tmo__aligned_alloc(64, sizeof *r);
	if (r == NULL)
		return NULL;
	memset(r, 0, sizeof *r);
	if (e->p->thread_bases) {
		if ((r->base = tmo__lf_base_new(e)) == NULL) {
			tmo__free(r);
			return NULL;
		}
		r->base->owner = r;
	}
	atomic_fetch_add_explicit(&e->rec_bytes, sizeof *r, memory_order_relaxed);
	return r;
}

void tmo__lf_recs_free(struct tmo *e)
{
	struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire);
	while (r != NULL) {
		struct lf_rec *next = atomic_load_explicit(&r->next, memory_order_relaxed);
		if (r->base != NULL)
			tmo__lf_base_free(e, r->base);
		tmo__free(r);
		r = next;
	}
	atomic_store_explicit(&e->recs, NULL, memory_order_relaxed);
}

/* The calling thread gives r back (its exit, or it uses too many engines):
 * ring nodes go to the inbox, free nodes to the depot; the record, its
 * counters and its base stay with the engine for the next thread. */
static void rec_detach(struct tmo *e, struct lf_rec *r)
{
	for (uint32_t i = 0; i < LF_RING_SLOTS; i++) {
		uint64_t w = atomic_load_explicit(&r->ring[i], memory_order_relaxed);
		if (w != 0)
			tmo__lf_ring_evict(e, r, w);
		atomic_store_explicit(&r->ring[i], 0, memory_order_relaxed);
	}
	tmo__lf_cache_park(e, r);
	pthread_mutex_lock(&e->rec_lock);
	r->attached = 0;
	r->next_free = e->free_recs;
	e->free_recs = r;
	pthread_mutex_unlock(&e->rec_lock);
}

/* Detach the entry's record if its engine still exists (g_lock held). */
static void ent_drop_locked(struct lf_tls_ent *x)
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
	ent_drop_locked(&tmo__lf_tls_hot);
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
	} else if ((r = rec_new(e)) != NULL) {
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
struct lf_rec *tmo__lf_rec_slow(struct tmo *e)
{
	if (tls_state == 2 || tmo__thread_engine == e)
		return NULL;
	uint64_t id = id_of(e);
	for (unsigned i = 0; i < TLS_MORE; i++) {
		if (tls_more[i].id == id) {
			struct lf_tls_ent x = tls_more[i];
			tls_more[i] = tmo__lf_tls_hot;
			tmo__lf_tls_hot = x;
			return x.rec;
		}
	}
	pthread_once(&g_once, once_init);
	if (tls_state == 0 && g_key_ok && pthread_setspecific(g_key, &tmo__lf_tls_hot) == 0)
		tls_state = 1; /* only so that tls_exit runs */
	struct lf_rec *r = rec_attach(e);
	if (r == NULL)
		return NULL;
	/* the hot entry moves to a free (or the victim's) place */
	if (tmo__lf_tls_hot.id != 0) {
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
		tls_more[k] = tmo__lf_tls_hot;
	}
	tmo__lf_tls_hot.id = id;
	tmo__lf_tls_hot.rec = r;
	return r;
}


uint64_t tmo__lf_my_cache_count(struct tmo *e)
{
	return tmo__lf_tls_hot.id == e->base.id ? tmo__lf_tls_hot.rec->cache_n : 0;
}
