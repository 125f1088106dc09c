/*
 * What the engine's arms, prevented cancels and fires add up to: every
 * thread's record keeps its own counters (relaxed), summed here for
 * tmo_stats and for the pool's growth bound (pool.c).
 */
#include "count.h"

/* Arms, prevented cancels and fires from every counter (relaxed). */
void tmo__lf_counts(struct tmo *e, uint64_t *armed_out, uint64_t *prevented_out,
                    uint64_t *fired_out)
{
	uint64_t armed = atomic_load_explicit(&e->armed_bare, memory_order_relaxed) +
	                 atomic_load_explicit(&e->tt_rec->head, memory_order_relaxed);
	uint64_t prevented = atomic_load_explicit(&e->prevented_bare, memory_order_relaxed) +
	                     atomic_load_explicit(&e->tt_rec->prevented, memory_order_relaxed);
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		armed += atomic_load_explicit(&r->head, memory_order_relaxed);
		prevented += atomic_load_explicit(&r->prevented, memory_order_relaxed);
	}
	*armed_out = armed;
	*prevented_out = prevented;
	*fired_out = atomic_load_explicit(&e->fired, memory_order_relaxed);
}

uint64_t tmo__lf_pending(struct tmo *e)
{
	uint64_t armed, prevented, fired;
	tmo__lf_counts(e, &armed, &prevented, &fired);
	return armed > fired + prevented ? armed - fired - prevented : 0;
}
