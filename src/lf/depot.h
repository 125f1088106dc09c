/*
 * depot.c: free nodes: the depot (a lock-free stack of chains of at most
 * LF_CHAIN), the threads' caches and spares, and the nodes of threads
 * without a record.
 */
#ifndef TMO_LF_DEPOT_H
#define TMO_LF_DEPOT_H

#include "pool.h"

/* A free node for r's cache: refills it from the depot or the arena.
 * Returns NULL with *err = TMO_ENOMEM or TMO_EAGAIN (the arena is full). */
struct lf_node *tmo__lf_cache_refill(struct tmo *e, struct lf_rec *r, int *err);
/* r's cache grew past LF_CACHE_MAX: a chain goes to the depot. */
void tmo__lf_cache_spill(struct tmo *e, struct lf_rec *r);
static inline void lf_cache_put(struct tmo *e, struct lf_rec *r, struct lf_node *n)
{
	n->free_next = r->cache;
	r->cache = n;
	if (LF_UNLIKELY(++r->cache_n > LF_CACHE_MAX))
		tmo__lf_cache_spill(e, r);
}
/* r's own base emptied as n was cancelled out of it: n and the whole cache
 * go to r's spare (depot.c, Idle caches). */
void tmo__lf_cache_idle(struct tmo *e, struct lf_rec *r, struct lf_node *n);
/* The timer thread frees a node it removed after a cancel, or dropped:
 * back to the record of the thread that armed it where its aux names one
 * (depot.c, Homes), else to its own cache. */
void tmo__lf_tt_free(struct tmo *e, struct lf_node *n);
/* The record a node's aux names as its home: its base's owner, or the
 * record an LF_IN_TT node came from; NULL for none (mpsc's arms). */
struct lf_rec *tmo__lf_home_of(uintptr_t aux);
/* A thread with no record frees one node / takes one. */
void tmo__lf_free_bare(struct tmo *e, struct lf_node *n);
struct lf_node *tmo__lf_alloc_bare(struct tmo *e, int *err);
/* The timer thread's cache goes to the depot, before a trim (its record
 * has no spare, and is no one's home). */
void tmo__lf_cache_return(struct tmo *e, struct lf_rec *r);
/* A record detaches: its cache joins its spare, which stays with it, and
 * its home too, for the next thread that attaches it (depot.c, Spares). */
void tmo__lf_cache_park(struct tmo *e, struct lf_rec *r);
/* The trimmer (the timer thread) takes r's spare and home whole: returns
 * the spare's chains (linked as the depot's), *home the home list (linked
 * by free_next); both NULL for a record with no spare. */
struct lf_node *tmo__lf_rec_free_take(struct tmo *e, struct lf_rec *r, struct lf_node **home);
/* The timer thread gives r free nodes through its home: a list linked by
 * free_next, head to tail, of count nodes. */
void tmo__lf_home_give(struct lf_rec *r, struct lf_node *head, struct lf_node *tail,
                       uint32_t count);
/* Free nodes in every record's spare and home. */
uint64_t tmo__lf_spares_count(struct tmo *e);
/* The depot itself (depot.c, trim.c). */
void tmo__lf_depot_push(struct tmo *e, struct lf_node *head, uint32_t count);
struct lf_node *tmo__lf_depot_take_all(struct tmo *e);
static inline struct lf_node *lf_chain_next(struct lf_node *head)
{
	return (struct lf_node *)atomic_load_explicit(&head->aux, memory_order_relaxed);
}

#endif /* TMO_LF_DEPOT_H */
