/*
 * The lock-free engine's life: create, destroy (also in a forked child),
 * stats, park, debug.  lf.h has the design; the last file of src/lf/'s
 * order (docs/lockfree.md): it uses every other.
 */
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "clock.h"
#include "count.h"
#include "pool.h"
#include "base.h"
#include "rec.h"
#include "tt.h"
#include "timer.h"
#include "engine.h"

/* ---- create / destroy ------------------------------------------------------------------ */

static int locks_init(struct tmo *e)
{
	if (pthread_mutex_init(&e->rec_lock, NULL) != 0)
		return -1;
	if (pthread_mutex_init(&e->mem_lock, NULL) != 0) {
		pthread_mutex_destroy(&e->rec_lock);
		return -1;
	}
	return 0;
}

static void locks_fini(struct tmo *e)
{
	pthread_mutex_destroy(&e->mem_lock);
	pthread_mutex_destroy(&e->rec_lock);
}

static void engine_free(struct tmo *e)
{
	tmo__lf_recs_free(e);
	if (e->tt_base != NULL)
		tmo__lf_base_free(e, e->tt_base);
	tmo__free(e->tt_rec);
	if (e->tt != NULL) {
		tmo__free(e->tt->due);
		tmo__free(e->tt->tmp);
		tmo__free(e->tt);
	}
	if (e->pool.arena != NULL)
		tmo__lf_pool_fini(e);
	tmo__free(e);
}

int tmo__lf_create(const struct lf_params *p, const struct tmo_config *cfg, struct tmo **out)
{
	if (p->thread_bases && !p->sched->wheel)
		return TMO_EINVAL; /* per-thread bases are wheels (lf_own_wheel) */
	struct tmo *e = tmo__aligned_alloc(64, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	memset(e, 0, sizeof *e);
	e->base.ops = p->ops;
	e->p = p;
	e->resolution_ns = cfg->resolution_ns > 0 ? cfg->resolution_ns : p->resolution_ns;
	/* the tick period scales with a configured resolution */
	e->tick_ns = p->tick_ns > 0 ? p->tick_ns * e->resolution_ns / p->resolution_ns : 0;
	if (p->tick_ns > 0 && e->tick_ns <= 0)
		e->tick_ns = 1;
	e->margin_ns = e->resolution_ns / 20 > 10000 ? e->resolution_ns / 20 : 10000;
	e->origin_ns = tmo_now_ns(); /* every base's tick grid starts here */
	ck_stack_init(&e->inbox);
	ck_ec32_init(&e->wake_ec, 0);
	ck_ec32_init(&e->done_ec, 0);
	int rc = TMO_ESYS;
	if (locks_init(e) != 0)
		goto fail_free;
	if (tmo__park_init(&e->park) != 0)
		goto fail_rec;
	if ((rc = tmo__lf_pool_init(e)) != 0)
		goto fail_park;
	tmo__lf_clock_init(e);
	rc = TMO_ENOMEM;
	e->tt = tmo__calloc(1, sizeof *e->tt);
	if (e->tt == NULL)
		goto fail_mem;
	e->tt->due_cap = DUE_FIRST;
	e->tt->due = tmo__malloc(DUE_FIRST * sizeof *e->tt->due);
	e->tt->tmp = tmo__malloc(DUE_FIRST * sizeof *e->tt->tmp);
	if (e->tt->due == NULL || e->tt->tmp == NULL)
		goto fail_mem;
	if ((e->tt_base = tmo__lf_base_new(e)) == NULL)
		goto fail_mem;
	if ((e->tt_rec = tmo__aligned_alloc(64, sizeof *e->tt_rec)) == NULL)
		goto fail_mem;
	memset(e->tt_rec, 0, sizeof *e->tt_rec);
	if ((rc = tmo__thread_create(&e->thread, NULL, tmo__lf_timer_main, e)) != 0)
		goto fail_mem;
	tmo__lf_engine_register(e);
	*out = e;
	return 0;

fail_mem:
	tmo__park_fini(&e->park);
	locks_fini(e);
	engine_free(e);
	return rc;
fail_park:
	tmo__park_fini(&e->park);
fail_rec:
	locks_fini(e);
fail_free:
	tmo__free(e);
	return rc;
}

/* Destroy: an arm still pending is cancelled, and its timer says so. */
static void cancel_left(struct tmo *e, struct lf_node *n)
{
	uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
	unsigned st = lf_st_of(s);
	if (st == LF_RING || st == LF_QUEUED || st == LF_IN_STRUCT)
		atomic_store_explicit(lf_timer_word(n->timer),
		                      lf_word(lf_idx_of(e, n), lf_gen_of(s), LF_CANCELLED_OUT),
		                      memory_order_release);
}

void tmo__lf_destroy(struct tmo *e)
{
	atomic_store_explicit(&e->stop, 1, memory_order_release);
	tmo__park_release(&e->park);
	tmo__lf_ec_wake(&e->wake_ec);
	pthread_join(e->thread, NULL);
	/* no thread exit touches our records after this */
	tmo__lf_engine_unregister(e);
	tmo__lf_pool_each(e, cancel_left);
	tmo__park_fini(&e->park);
	locks_fini(e);
	engine_free(e);
}

void tmo__lf_destroy_forked(struct tmo *e)
{
	/* The child has no timer thread; the parent's locks may have been
	 * held at fork time: free memory only. */
	tmo__lf_engine_unregister(e);
	engine_free(e);
}
/* ---- stats, park, debug ------------------------------------------------------------------ */

int tmo__lf_stats(struct tmo *e, struct tmo_stats *out)
{
	uint64_t armed, prevented, fired;
	tmo__lf_counts(e, &armed, &prevented, &fired);
	out->pending = armed > fired + prevented ? armed - fired - prevented : 0;
	out->held_nodes = tmo__lf_pool_nodes(e);
	out->held_bytes = tmo__lf_pool_bytes(e) + atomic_load_explicit(&e->rec_bytes, memory_order_relaxed) +
	                  atomic_load_explicit(&e->tt->bytes, memory_order_relaxed);
	out->threads = 1;
	out->fired = fired;
	out->cancelled = prevented;
	return 0;
}

/* Park's wake-up: the timer thread sees the request at the top of its loop. */
static void lf_park_wake(struct tmo *e) { tmo__lf_ec_wake(&e->wake_ec); }

static int lf_park(struct tmo *e, int on) { return tmo__park_set(&e->park, on, NULL, NULL, lf_park_wake, e); }

const struct tmo_testing_ops tmo__lf_testing_ops = {.park = lf_park};

void tmo__lf_debug(struct tmo *e, struct lf_debug *out)
{
	memset(out, 0, sizeof *out);
	out->filed = atomic_load_explicit(&e->tt->filed, memory_order_relaxed);
	out->stolen = atomic_load_explicit(&e->tt->stolen, memory_order_relaxed);
	out->inbox = atomic_load_explicit(&e->tt->via_inbox, memory_order_relaxed);
	out->trims = atomic_load_explicit(&e->pool.trimmed_pages, memory_order_relaxed);
	out->trim_runs = atomic_load_explicit(&e->pool.trim_runs, memory_order_acquire);
	out->fence = (atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_FENCE) != 0;
	out->clock = !tmo__lf_use_tsc;
	out->cache_count = tmo__lf_my_cache_count(e);
	if (tmo__lf_tls_hot.id == e->base.id)
		out->home_count = atomic_load_explicit(&tmo__lf_tls_hot.rec->home_n, memory_order_relaxed);
	pthread_mutex_lock(&e->rec_lock);
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		out->spilled += atomic_load_explicit(&r->spilled, memory_order_relaxed);
		out->direct += atomic_load_explicit(&r->direct, memory_order_relaxed);
	}
	pthread_mutex_unlock(&e->rec_lock);
}

uint64_t tmo__lf_free_nodes(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	uint64_t n = e->tt_rec->cache_n + atomic_load_explicit(&p->depot_nodes, memory_order_relaxed);
	pthread_mutex_lock(&e->rec_lock);
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed))
		n += r->cache_n + atomic_load_explicit(&r->spare_n, memory_order_relaxed) +
		     atomic_load_explicit(&r->home_n, memory_order_relaxed);
	pthread_mutex_unlock(&e->rec_lock);
	for (ck_stack_entry_t *l = CK_STACK_FIRST(&p->loose); l != NULL; l = CK_STACK_NEXT(l))
		n++;
	return n;
}
