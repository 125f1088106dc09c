/*
 * Free nodes of the lock-free core's arena (pool.c): each record's cache
 * (at most LF_CACHE_MAX, its owner's alone) and the depot, a lock-free
 * stack of chains of LF_CHAIN nodes shared by every thread.  The depot's
 * head word is a tag (high 32 bits, bumped by every push and pop) and the
 * top chain's index + 1 (low 32 bits), so a pop that read a head which
 * was popped and pushed again meanwhile loses its CAS; reading a stale
 * chain's link is safe because the arena is type-stable.  A cache that
 * runs dry refills from the depot, else the pool grows; one that grows
 * past LF_CACHE_MAX spills its oldest chains back.
 */
#include "clock.h"
#include "depot.h"

#define DEPOT_TAG ((uint64_t)1 << 32)

static inline uint64_t depot_word(const struct tmo *e, uint64_t old, struct lf_node *top)
{
	return ((old & ~(DEPOT_TAG - 1)) + DEPOT_TAG) | (top != NULL ? lf_idx_of(e, top) + 1u : 0u);
}

/* Push a chain of count nodes.  The count is added first, so depot_nodes
 * never reads below what the stack holds. */
void tmo__lf_depot_push(struct tmo *e, struct lf_node *head, uint32_t count)
{
	struct lf_pool *p = &e->pool;
	head->s.chain_n = count;
	atomic_fetch_add_explicit(&p->depot_nodes, count, memory_order_relaxed);
	uint64_t w = atomic_load_explicit(&p->depot, memory_order_relaxed);
	do {
		struct lf_node *top = (uint32_t)w != 0 ? lf_node_at(e, (uint32_t)w - 1) : NULL;
		atomic_store_explicit(&head->aux, (uintptr_t)top, memory_order_relaxed);
	} while (!atomic_compare_exchange_weak_explicit(&p->depot, &w, depot_word(e, w, head),
	                                                memory_order_release,
	                                                memory_order_relaxed));
}

/* Pop the top chain (NULL when the depot is empty). */
static struct lf_node *depot_pop(struct tmo *e, uint32_t *count)
{
	struct lf_pool *p = &e->pool;
	uint64_t w = atomic_load_explicit(&p->depot, memory_order_acquire);
	struct lf_node *c;
	do {
		if ((uint32_t)w == 0)
			return NULL;
		c = lf_node_at(e, (uint32_t)w - 1);
	} while (!atomic_compare_exchange_weak_explicit(&p->depot, &w,
	                                                depot_word(e, w, lf_chain_next(c)),
	                                                memory_order_acquire,
	                                                memory_order_acquire));
	*count = c->s.chain_n;
	atomic_fetch_sub_explicit(&p->depot_nodes, *count, memory_order_relaxed);
	return c;
}

/* Every chain at once (the trimmer); the caller subtracts what it counts. */
struct lf_node *tmo__lf_depot_take_all(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	uint64_t w = atomic_load_explicit(&p->depot, memory_order_acquire);
	while (!atomic_compare_exchange_weak_explicit(&p->depot, &w, depot_word(e, w, NULL),
	                                              memory_order_acquire,
	                                              memory_order_acquire))
		;
	return (uint32_t)w != 0 ? lf_node_at(e, (uint32_t)w - 1) : NULL;
}

/* Push a list (linked by free_next, NULL-ended) to the depot in chains of
 * at most LF_CHAIN nodes. */
static void depot_push_list(struct tmo *e, struct lf_node *list)
{
	while (list != NULL) {
		struct lf_node *head = list, *tail = head;
		uint32_t k = 1;
		for (; k < LF_CHAIN && tail->free_next != NULL; k++)
			tail = tail->free_next;
		list = tail->free_next;
		tail->free_next = NULL;
		tmo__lf_depot_push(e, head, k);
	}
}

/* Keep the first LF_CHAIN nodes of chain c (count nodes); the rest go to
 * the depot in chains of LF_CHAIN, for other threads (a growth step or a
 * page-sized chain kept by one thread would hold nodes others need). */
static uint32_t chain_trim(struct tmo *e, struct lf_node *c, uint32_t count)
{
	if (count <= LF_CHAIN)
		return count;
	struct lf_node *tail = c;
	for (uint32_t i = 1; i < LF_CHAIN; i++)
		tail = tail->free_next;
	struct lf_node *rest = tail->free_next;
	tail->free_next = NULL;
	depot_push_list(e, rest);
	return LF_CHAIN;
}

struct lf_node *tmo__lf_cache_refill(struct tmo *e, struct lf_rec *r, int *err)
{
	uint32_t count = 0;
	struct lf_node *c = depot_pop(e, &count);
	if (c == NULL && (c = tmo__lf_pool_grow(e, &count, err)) == NULL)
		return NULL;
	count = chain_trim(e, c, count);
	/* The callers refill an empty cache: the chain becomes the cache, with
	 * no walk to its tail.  The walk read LF_CHAIN nodes one miss after
	 * another, lines another thread freed last (perf, two threads arming
	 * held timers: 39 % of the samples, on that loop); an arm reads its
	 * node anyway, and the held path reads the next one ahead (arm.c). */
	if (LF_UNLIKELY(r->cache != NULL)) {
		struct lf_node *tail = c;
		while (tail->free_next != NULL)
			tail = tail->free_next;
		tail->free_next = r->cache;
	}
	r->cache = c;
	r->cache_n += count;
	return c;
}

/* r's cache grew past LF_CACHE_MAX: its oldest nodes go to the depot in
 * chains, the newest (hot) stay.  A cache whose bottom never moved would
 * pin a few early pages for the thread's life (trim gives back only
 * wholly free pages). */
void tmo__lf_cache_spill(struct tmo *e, struct lf_rec *r)
{
	uint32_t keep = r->cache_n - (r->cache_n - LF_CHAIN) / LF_CHAIN * LF_CHAIN;
	struct lf_node *tail = r->cache;
	for (uint32_t i = 1; i < keep; i++)
		tail = tail->free_next;
	struct lf_node *old = tail->free_next;
	tail->free_next = NULL;
	r->cache_n = keep;
	depot_push_list(e, old);
	/* Trim runs as the timer thread goes to sleep: frees made while it
	 * sleeps would wait a timeout for it (guarantee 6).  With more free
	 * nodes than trim keeps it is woken, once until it has trimmed, and
	 * trims TRIM_DEFER later (timer.c): a stream of frees costs it one
	 * wake-up and one trim per TRIM_DEFER, and the last of them go back
	 * with the rest (woken only past 256, it left 100-600 free nodes in
	 * the depot after a batch of cancels until its next long sleep). */
	struct lf_pool *p = &e->pool;
	if (LF_UNLIKELY(atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING) &&
	    atomic_load_explicit(&p->depot_nodes, memory_order_relaxed) > TRIM_KEEP &&
	    !atomic_load_explicit(&p->trim_asked, memory_order_relaxed)) {
		atomic_store_explicit(&p->trim_asked, 1, memory_order_relaxed);
		tmo__lf_wake_for(e, 0);
	}
}

void tmo__lf_cache_return(struct tmo *e, struct lf_rec *r)
{
	depot_push_list(e, r->cache);
	r->cache = NULL;
	r->cache_n = 0;
}

void tmo__lf_free_bare(struct tmo *e, struct lf_node *n)
{
	ck_stack_push_upmc(&e->pool.loose, &n->link);
}

struct lf_node *tmo__lf_alloc_bare(struct tmo *e, int *err)
{
	uint32_t count = 0;
	struct lf_node *c = depot_pop(e, &count);
	if (c == NULL && (c = tmo__lf_pool_grow(e, &count, err)) == NULL)
		return NULL;
	if (count > 1)
		tmo__lf_depot_push(e, c->free_next, count - 1);
	c->free_next = NULL;
	return c;
}
