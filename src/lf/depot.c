/*
 * Free nodes of the lock-free core's arena (pool.c): each record's cache
 * (at most LF_CACHE_MAX, its owner's alone), each record's spare, and the
 * depot, a lock-free stack of chains of LF_CHAIN nodes shared by every
 * thread.  The depot's head word is a tag (high 32 bits, bumped by every
 * push and pop) and the top chain's index + 1 (low 32 bits), so a pop that
 * read a head which was popped and pushed again meanwhile loses its CAS;
 * reading a stale chain's link is safe because the arena is type-stable.
 *
 * Spares.  A cache that grows past LF_CACHE_MAX spills its oldest chains to
 * its record's spare (up to LF_SPARE_MAX nodes, then to the depot); a cache
 * that runs dry refills from its spare, then the depot, then grows the
 * pool, keeping the whole growth step (pool.h, GROW_PAGES_MIN: each step of
 * a record twice its last, the rest of it to its spare).  So the nodes a
 * thread frees come back to that thread, and its nodes lie in pages no
 * other thread's nodes share.  Through the depot alone, a burst of a
 * hundred cancels spilled chains that the other thread's arms took back,
 * and two threads' held nodes shared pages: two threads holding timers on
 * one wheel engine ran each pair at 2-3 times the cost of one thread alone
 * (the throughput scenario's held case, 2 threads / 1: 0.65x on the 2-vCPU
 * AMD EPYC VM; 1.0-1.45x with spares).  A spare is a stack of chains like
 * the depot but with no tag: its owner alone pushes and pops, and anyone
 * else only takes it whole (an exchange), so the head a pop read cannot
 * come back before its CAS.  Others take it: the trimmer (trim.c: the
 * nodes of pages it does not give back go home, to the record they came
 * from), and a refill that found the depot empty and the pool unable to
 * grow (the soft bound or the reservation): free nodes in another
 * thread's spare are used before an arm is refused.  A thread that exits
 * leaves its cache in its record's spare, and spare and home stay with
 * the record for the next thread that attaches it.  Through the depot, an
 * exited thread's nodes and (a trim) a live one's went to whichever
 * thread refilled next: two threads holding timers, made anew for each
 * round as Google Benchmark makes them for each run, ran at 63-91 ns a
 * pair each in 12 of 21 rounds after the first, against 30-37 in it; now
 * 28-35 in most (the 2-vCPU AMD EPYC VM, results/2026-12-05-epyc2-41339d7;
 * `unit/lf_keep` checks where the nodes go).  The timer
 * thread keeps no spare: the nodes it frees (fired, or cancelled in its
 * base) are other threads' to use.
 *
 * Homes.  A node the timer thread frees after its owner's cancel goes back
 * to that owner, not to its cache: a ring arm it stole (filed in its own
 * base, aux naming the record it came from) or a node left on a base's
 * cancel stack (the base names its owner).  Through the timer thread's
 * cache and the depot, the rings' arms it steals every round (a held
 * timer's slot arm) went to whichever thread refilled next: two threads
 * holding timers on one wheel engine mixed their nodes in each other's
 * lines and pages, and each paid for the other's misses (a probe, two
 * threads each holding 10,000 on the 2-vCPU AMD EPYC VM: after 30M pairs
 * 42 % of one thread's held nodes shared a 128-byte pair with the
 * other's, and each pair cost 65-80 ns against 34-40 ns alone; with the
 * homes 30-33 ns each, and no pair shared).  A home is a list the timer
 * thread pushes onto (a CAS) and anyone takes whole (an exchange: no pop,
 * no ABA): its owner first when its cache runs dry, before its spare; the
 * trimmer, a thread that exits and a refill that found nothing else, like
 * a spare.  The timer thread's own record is no one's home (its base has
 * no owner, its arms name none).  Fired nodes still
 * go to the timer thread's cache: a burst's fires would pay a CAS each.
 *
 * Idle caches.  A cache is its owner's alone: the trimmer cannot take it,
 * and each node in it pins its page.  So the cancel that empties its
 * owner's base (the wheel's, none of its timers filed there any more)
 * sends the whole cache to the spare, where the trimmer takes it; what
 * stays in the cache is the ring's arms cancelled after that, at most
 * LF_RING_SLOTS.  An idle thread's 24-32 cached nodes pinned 6 to 10
 * pages (a free node or three in each, the arms' order reshuffled over
 * many batches by the ring arms the timer thread steals), and the
 * retention scenario's wheel settled at 38.6-62.6 KiB; now 30.6 KiB
 * (results/2026-12-06-epyc2-d31142e; unit/lf_keep, idle).  A thread that
 * keeps timers filed never pays it; one that empties its base every few
 * dozen arms pays a spill and a refill each time (probes of 9-48 held arms
 * cancelled in order: within the run-to-run spread of the same loop
 * without it).
 */
#include "clock.h"
#include "depot.h"
#include "hook.h"

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
	/* acq_rel: a pop that reads the emptied word sees the trim's
	 * allowance (pool.c, may_grow) */
	while (!atomic_compare_exchange_weak_explicit(&p->depot, &w, depot_word(e, w, NULL),
	                                              memory_order_acq_rel,
	                                              memory_order_acquire))
		;
	return (uint32_t)w != 0 ? lf_node_at(e, (uint32_t)w - 1) : NULL;
}

/* ---- spares ----------------------------------------------------------------------- */

/* r has a spare: a record of an application thread (not the timer
 * thread's, nor a thread without a record). */
static inline int spare_of(const struct tmo *e, const struct lf_rec *r)
{
	return r != NULL && r != e->tt_rec;
}

/* r's owner pushes a chain of count nodes onto its spare. */
static void spare_push(struct lf_rec *r, struct lf_node *head, uint32_t count)
{
	head->s.chain_n = count;
	atomic_fetch_add_explicit(&r->spare_n, count, memory_order_relaxed);
	struct lf_node *top = atomic_load_explicit(&r->spare, memory_order_relaxed);
	do
		atomic_store_explicit(&head->aux, (uintptr_t)top, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&r->spare, &top, head, memory_order_release,
	                                              memory_order_relaxed));
}

/* r's owner pops its spare's top chain (NULL when empty). */
static struct lf_node *spare_pop(struct lf_rec *r, uint32_t *count)
{
	struct lf_node *c = atomic_load_explicit(&r->spare, memory_order_acquire);
	do {
		if (c == NULL)
			return NULL;
	} while (!atomic_compare_exchange_weak_explicit(&r->spare, &c, lf_chain_next(c),
	                                                memory_order_acquire,
	                                                memory_order_acquire));
	*count = c->s.chain_n;
	atomic_fetch_sub_explicit(&r->spare_n, *count, memory_order_relaxed);
	return c;
}

/* Anyone: take r's whole spare (its chains, linked as the depot's). */
static struct lf_node *spare_take(struct lf_rec *r)
{
	if (atomic_load_explicit(&r->spare, memory_order_relaxed) == NULL)
		return NULL;
	struct lf_node *c = atomic_exchange_explicit(&r->spare, NULL, memory_order_acquire);
	uint32_t n = 0;
	for (struct lf_node *x = c; x != NULL; x = lf_chain_next(x))
		n += x->s.chain_n;
	atomic_fetch_sub_explicit(&r->spare_n, n, memory_order_relaxed);
	return c;
}

/* ---- homes ------------------------------------------------------------------------ */

struct lf_rec *tmo__lf_home_of(uintptr_t aux)
{
	if ((aux & 3u) == LF_IN_THREAD) {
		struct lf_base *b = (struct lf_base *)(aux & ~(uintptr_t)3);
		return b != NULL ? b->owner : NULL;
	}
	if ((aux & 3u) == LF_IN_TT)
		return (struct lf_rec *)(aux & LF_HOME_MASK);
	return NULL;
}

void tmo__lf_home_give(struct lf_rec *r, struct lf_node *head, struct lf_node *tail,
                       uint32_t count)
{
	/* the count first: home_n never reads below what the list holds */
	atomic_fetch_add_explicit(&r->home_n, count, memory_order_relaxed);
	struct lf_node *top = atomic_load_explicit(&r->home, memory_order_relaxed);
	do
		tail->free_next = top;
	while (!atomic_compare_exchange_weak_explicit(&r->home, &top, head, memory_order_release,
	                                              memory_order_relaxed));
}

void tmo__lf_tt_free(struct tmo *e, struct lf_node *n)
{
	struct lf_rec *home = tmo__lf_home_of(atomic_load_explicit(&n->aux, memory_order_relaxed));
	if (home == NULL)
		lf_cache_put(e, e->tt_rec, n);
	else
		tmo__lf_home_give(home, n, n, 1);
}

/* Anyone: take r's whole home list (linked by free_next); *count its
 * nodes. */
static struct lf_node *home_take(struct lf_rec *r, uint32_t *count)
{
	if (atomic_load_explicit(&r->home, memory_order_relaxed) == NULL)
		return NULL;
	struct lf_node *c = atomic_exchange_explicit(&r->home, NULL, memory_order_acquire);
	uint32_t n = 0;
	for (struct lf_node *x = c; x != NULL; x = x->free_next)
		n++;
	atomic_fetch_sub_explicit(&r->home_n, n, memory_order_relaxed);
	*count = n;
	return c;
}

/* Push chains linked as the depot's (a spare taken whole) onto the depot. */
static void depot_push_chains(struct tmo *e, struct lf_node *c)
{
	while (c != NULL) {
		struct lf_node *next = lf_chain_next(c);
		tmo__lf_depot_push(e, c, c->s.chain_n);
		c = next;
	}
}

/* Push a list (linked by free_next, NULL-ended) in chains of at most
 * LF_CHAIN: to r's spare while it holds fewer than LF_SPARE_MAX, the rest
 * (and all of it for a record with no spare, or r NULL) to the depot. */
static void push_list(struct tmo *e, struct lf_rec *r, struct lf_node *list)
{
	while (list != NULL) {
		struct lf_node *head = list, *tail = head;
		uint32_t k = 1;
		for (; k < LF_CHAIN && tail->free_next != NULL; k++)
			tail = tail->free_next;
		list = tail->free_next;
		tail->free_next = NULL;
		if (spare_of(e, r) &&
		    atomic_load_explicit(&r->spare_n, memory_order_relaxed) + k <= LF_SPARE_MAX)
			spare_push(r, head, k);
		else
			tmo__lf_depot_push(e, head, k);
	}
}

struct lf_node *tmo__lf_rec_free_take(struct tmo *e, struct lf_rec *r, struct lf_node **home)
{
	*home = NULL;
	if (!spare_of(e, r))
		return NULL;
	uint32_t k;
	*home = home_take(r, &k);
	return spare_take(r);
}

/* Free nodes in every record's spare and home (tests, the refusal rule). */
uint64_t tmo__lf_spares_count(struct tmo *e)
{
	uint64_t n = 0;
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed))
		n += atomic_load_explicit(&r->spare_n, memory_order_relaxed) +
		     atomic_load_explicit(&r->home_n, memory_order_relaxed);
	return n;
}

/* The depot is empty and the pool cannot grow: a chain from another
 * record's spare (the rest of that spare goes to the depot), or its home
 * whole, or NULL. */
static struct lf_node *spare_steal(struct tmo *e, struct lf_rec *self, uint32_t *count)
{
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		if (r == self)
			continue;
		struct lf_node *c = spare_take(r);
		if (c != NULL) {
			depot_push_chains(e, lf_chain_next(c));
			*count = c->s.chain_n;
			return c;
		}
		if ((c = home_take(r, count)) != NULL)
			return c;
	}
	return NULL;
}

/* ---- caches ----------------------------------------------------------------------- */

/* Keep the first LF_CHAIN nodes of chain c (count nodes); the rest go to
 * r's spare (a growth step: all of it r's, Spares above), or to the depot
 * for a record with no spare (a page-sized chain kept by the timer thread
 * would hold nodes others need). */
static uint32_t chain_trim(struct tmo *e, struct lf_rec *r, struct lf_node *c, uint32_t count)
{
	if (count <= LF_CHAIN)
		return count;
	struct lf_node *tail = c;
	for (uint32_t i = 1; i < LF_CHAIN; i++)
		tail = tail->free_next;
	struct lf_node *rest = tail->free_next;
	tail->free_next = NULL;
	push_list(e, r, rest);
	return LF_CHAIN;
}

struct lf_node *tmo__lf_cache_refill(struct tmo *e, struct lf_rec *r, int *err)
{
	LF_HOOK(refill, e);
	uint32_t count = 0;
	int own = spare_of(e, r);
	struct lf_node *c = NULL;
	if (own && (c = home_take(r, &count)) == NULL)
		c = spare_pop(r, &count);
	if (c == NULL)
		c = depot_pop(e, &count);
	if (c == NULL) {
		/* a record with no spare (the timer thread's) grows by the first
		 * step each time: the rest of a larger one would go to the depot */
		uint32_t want = own && r->grow_pages != 0 ? r->grow_pages : GROW_PAGES_MIN;
		if ((c = tmo__lf_pool_grow(e, want, &count, err)) != NULL) {
			if (own)
				r->grow_pages = want < GROW_PAGES_MAX ? 2 * want : GROW_PAGES_MAX;
		} else if (*err != TMO_EAGAIN ||
		           /* a trim that held the depot has ended since (pool.c,
		            * may_grow): its nodes are back */
		           ((c = depot_pop(e, &count)) == NULL &&
		            (c = spare_steal(e, r, &count)) == NULL))
			return NULL;
	}
	count = chain_trim(e, r, c, count);
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

static void ask_trim(struct tmo *e, struct lf_rec *r);
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
	push_list(e, r, old);
	ask_trim(e, r);
}

void tmo__lf_cache_idle(struct tmo *e, struct lf_rec *r, struct lf_node *n)
{
	n->free_next = r->cache;
	r->cache = n;
	tmo__lf_cache_park(e, r);
	ask_trim(e, r);
}

/* The timer thread trims as it goes to sleep; frees made while it sleeps
 * wake it for one. */
static void ask_trim(struct tmo *e, struct lf_rec *r)
{
	/* Trim runs as the timer thread goes to sleep: frees made while it
	 * sleeps would wait a timeout for it (guarantee 6).  With more free
	 * nodes than trim keeps it is woken, once until it has trimmed, and
	 * trims TRIM_DEFER later (timer.c): a stream of frees costs it one
	 * wake-up and one trim per TRIM_DEFER, and the last of them go back
	 * with the rest (woken only past 256, it left 100-600 free nodes in
	 * the depot after a batch of cancels until its next long sleep). */
	struct lf_pool *p = &e->pool;
	if (LF_UNLIKELY(atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING) &&
	    atomic_load_explicit(&p->depot_nodes, memory_order_relaxed) +
	            atomic_load_explicit(&r->spare_n, memory_order_relaxed) >
	        TRIM_KEEP &&
	    !atomic_load_explicit(&p->trim_asked, memory_order_relaxed)) {
		atomic_store_explicit(&p->trim_asked, 1, memory_order_relaxed);
		tmo__lf_wake_for(e, 0);
	}
}

void tmo__lf_cache_park(struct tmo *e, struct lf_rec *r)
{
	/* to its spare (beyond LF_SPARE_MAX, the depot) */
	push_list(e, r, r->cache);
	r->cache = NULL;
	r->cache_n = 0;
}

void tmo__lf_cache_return(struct tmo *e, struct lf_rec *r)
{
	push_list(e, NULL, r->cache);
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
	if (c == NULL && (c = tmo__lf_pool_grow(e, GROW_PAGES_MIN, &count, err)) == NULL)
		return NULL;
	if (count > 1)
		tmo__lf_depot_push(e, c->free_next, count - 1);
	c->free_next = NULL;
	return c;
}
