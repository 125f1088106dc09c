/*
 * Giving the pool's memory back (pool.c has the pool and its design): the
 * timer thread, as it goes to sleep, returns wholly free pages.
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "depot.h"
#include "trim.h"
#include "hook.h"

/* Chains of single nodes freed by threads without a record join the depot. */
static void loose_collect(struct tmo *e)
{
	ck_stack_entry_t *l = ck_stack_batch_pop_upmc(&e->pool.loose);
	while (l != NULL) {
		ck_stack_entry_t *next = l->next;
		lf_cache_put(e, e->tt_rec, lf_node_of_link(l));
		l = next;
	}
}

/* A node in one of these states is in use; a free node keeps the state
 * it left in (FREE after a fire, CANCELLED, CANCEL_PENDING or DROPPED
 * after a cancel), and so may one in use (a cancelled arm in a ring, or
 * on its way to the timer thread). */
static inline int in_use(uint64_t s)
{
	unsigned st = lf_st_of(s);
	return st == LF_RING || st == LF_QUEUED || st == LF_IN_STRUCT || st == LF_FIRING;
}

/* Pages that may be wholly free (cand[pg] = 1): no node of the page reads
 * in use.  Only these can be given back; whether one is, the nodes the
 * trim holds tell (bucket_by_page), so a node taken from a cache meanwhile
 * keeps its page.  Pages given back earlier are not resident (mincore) and
 * are not read: a read would map them again.  Returns their count. */
static uint32_t candidates(struct tmo *e, uint32_t hwm, uint8_t *cand)
{
	size_t bytes = (size_t)hwm * PAGE_BYTES;
	long os = sysconf(_SC_PAGESIZE);
	unsigned char *vec = NULL;
	if (os >= (long)PAGE_BYTES &&
	    (vec = tmo__malloc((bytes + (size_t)os - 1) / (size_t)os)) != NULL &&
	    mincore(e->pool.arena, bytes, vec) != 0) {
		tmo__free(vec); /* read them all */
		vec = NULL;
	}
	uint32_t n = 0;
	for (uint32_t pg = 0; pg < hwm; pg++) {
		if (vec != NULL && !(vec[(size_t)pg * PAGE_BYTES / (size_t)os] & 1))
			continue;
		uint32_t i = 0;
		while (i < PAGE_NODES &&
		       !in_use(atomic_load_explicit(&lf_node_at(e, pg * PAGE_NODES + i)->state,
		                                    memory_order_relaxed)))
			i++;
		cand[pg] = i == PAGE_NODES;
		n += cand[pg];
	}
	tmo__free(vec);
	return n;
}

/* A free node of a candidate page joins its page's bucket: 1; else 0. */
static inline int bucket_put(struct tmo *e, uint32_t hwm, const uint8_t *cand, uint8_t *free_in,
                             struct lf_node **by_page, struct lf_node *n)
{
	uint32_t pg = page_of(e, n);
	if (pg >= hwm || !cand[pg])
		return 0;
	n->free_next = by_page[pg];
	by_page[pg] = n;
	free_in[pg]++;
	return 1;
}

/* Empty the depot into buckets by page: by_page[pg] lists candidate page
 * pg's free nodes, free_in[pg] of them; the nodes of other pages (and of
 * pages populated after hwm was read) go back to the depot as they are
 * met, in chains of LF_CHAIN, *back of them: a refill meanwhile finds
 * them.  Returns the number of nodes taken. */
static uint64_t bucket_by_page(struct tmo *e, uint32_t hwm, const uint8_t *cand, uint8_t *free_in,
                               struct lf_node **by_page, uint64_t *back)
{
	uint64_t taken = 0;
	struct lf_node *chain = NULL;
	uint32_t chain_n = 0;
	for (struct lf_node *c = tmo__lf_depot_take_all(e), *next_chain; c != NULL; c = next_chain) {
		next_chain = lf_chain_next(c);
		for (struct lf_node *n = c, *next; n != NULL; n = next, taken++) {
			next = n->free_next;
			if (bucket_put(e, hwm, cand, free_in, by_page, n))
				continue;
			n->free_next = chain;
			chain = n;
			if (++chain_n == LF_CHAIN) {
				tmo__lf_depot_push(e, chain, chain_n);
				*back += chain_n;
				chain = NULL;
				chain_n = 0;
			}
		}
	}
	if (chain != NULL) {
		tmo__lf_depot_push(e, chain, chain_n);
		*back += chain_n;
	}
	return taken;
}

/* Each application record's spare and home, taken whole: the nodes of
 * candidate pages join the buckets, the others go back to that record
 * through its home (the timer thread may push onto any home; onto a
 * spare only its owner pushes), *back of them.  Through the depot they
 * went to whichever thread refilled next, and two threads holding timers
 * came to share 128-byte pairs of nodes after a trim (depot.c, Spares).
 * Returns the number of nodes bucketed. */
static uint64_t bucket_records(struct tmo *e, uint32_t hwm, const uint8_t *cand,
                               uint8_t *free_in, struct lf_node **by_page, uint64_t *back)
{
	uint64_t taken = 0;
	for (struct lf_rec *r = atomic_load_explicit(&e->recs, memory_order_acquire); r != NULL;
	     r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
		struct lf_node *list, *keep = NULL, *keep_tail = NULL;
		uint32_t keep_n = 0;
		/* the home list, then each of the spare's chains */
		struct lf_node *chains = tmo__lf_rec_free_take(e, r, &list);
		for (;;) {
			for (struct lf_node *n = list, *next; n != NULL; n = next) {
				next = n->free_next;
				if (bucket_put(e, hwm, cand, free_in, by_page, n)) {
					taken++;
					continue;
				}
				n->free_next = keep;
				keep = n;
				if (keep_tail == NULL)
					keep_tail = n;
				keep_n++;
			}
			if (chains == NULL)
				break;
			list = chains;
			chains = lf_chain_next(chains);
		}
		if (keep != NULL)
			tmo__lf_home_give(r, keep, keep_tail, keep_n);
		*back += keep_n;
	}
	return taken;
}

/* Give pages [first, end), all of whose nodes are free, back to the kernel;
 * the run waits on `released` to be populated again.  Returns the pages given
 * back: 0 when the run's record could not be allocated (the nodes are kept). */
static uint32_t release_run(struct tmo *e, uint32_t first, uint32_t end, struct lf_node **by_page)
{
	struct lf_pool *p = &e->pool;
	uint64_t floor = 0;
	for (uint32_t pg = first; pg < end; pg++)
		for (uint32_t i = 0; i < PAGE_NODES; i++) {
			uint64_t g = lf_gen_of(atomic_load_explicit(
			    &lf_node_at(e, pg * PAGE_NODES + i)->state, memory_order_relaxed));
			if (g > floor)
				floor = g;
		}
	struct lf_run *run = tmo__malloc(sizeof *run);
	if (run == NULL) { /* keep them */
		for (uint32_t q = first; q < end; q++)
			tmo__lf_depot_push(e, by_page[q], PAGE_NODES);
		return 0;
	}
	run->first = first;
	run->count = end - first;
	/* floor + 1 > every generation used; LF_GEN_MASK wraps after 2^38 */
	run->gen_floor = (floor + 1) & LF_GEN_MASK;
	madvise(p->arena + ((size_t)first * PAGE_BYTES), (size_t)run->count * PAGE_BYTES,
	        MADV_DONTNEED);
	uint32_t pages = run->count; /* once pushed, a producer may shrink and free it */
	atomic_fetch_sub_explicit(&p->populated_pages, pages, memory_order_relaxed);
	ck_stack_push_upmc(&p->released, &run->link);
	return pages;
}

/* Which pages go back (cand[pg] = 1, the rest 0), from the free nodes
 * the trim holds of each (free_in) and those of other pages it pushed
 * back (kept): runs of wholly free pages, lowest first, once the free
 * nodes of pages that stay make up TRIM_KEEP.  Live and cached nodes
 * gather in low pages, and the pages above come free together.  The free
 * nodes of pages that stay anyway (a node in use or in a cache pins its
 * page; those pushed back) count first: wholly free pages are kept only to
 * make up TRIM_KEEP (an idle thread's cache pinned five to eight pages
 * beside two kept wholly free ones). */
static void plan_pages(uint32_t hwm, const uint8_t *free_in, uint8_t *cand, uint64_t kept)
{
	for (uint32_t pg = 0; pg < hwm; pg++)
		if (free_in[pg] != PAGE_NODES)
			kept += free_in[pg];
	for (uint32_t pg = 0; pg < hwm; pg++) {
		cand[pg] = free_in[pg] == PAGE_NODES && kept >= TRIM_KEEP;
		if (free_in[pg] == PAGE_NODES && !cand[pg])
			kept += PAGE_NODES;
	}
}

static void trim_pages(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	uint32_t hwm = atomic_load_explicit(&p->hwm_pages, memory_order_acquire);
	uint8_t *free_in = tmo__calloc(hwm, 1), *cand = tmo__calloc(hwm, 1);
	struct lf_node **by_page = tmo__calloc(hwm, sizeof *by_page);
	if (free_in == NULL || cand == NULL || by_page == NULL)
		goto out; /* try again next time */
	LF_HOOK(mem, e);
	LF_HOOK(trim_start, e);
	/* No page can be given back: the depot is not taken at all. */
	uint32_t cand_pages = candidates(e, hwm, cand);
	if (cand_pages == 0)
		goto out;
	/* Before the take (its CAS releases it): a refill that finds the depot
	 * emptied by it may grow past the soft bound (pool.c, may_grow) by one
	 * growth step; once pages are given back, the pool is under its bound
	 * again and grows as it would.  An allowance of the candidate pages
	 * let the pool reach nearly twice its size while the trim held the
	 * depot (mpsc in the sustain scenario beside four busy loops: 238 pages
	 * at the median peak, 255 at most, against 158 grown under the bound;
	 * past the scenario's limit in 2 runs of 12): a candidate is only a
	 * page no node of which reads in use, and a node on its way to the
	 * timer thread after a cancel does not (tests/hooked/lf_trim_inbox.c).
	 * Adding each run given back to the allowance counted those pages
	 * twice: the pool, under its bound again, grew by them too. */
	uint32_t a0 = cand_pages < GROW_PAGES_MAX ? cand_pages : GROW_PAGES_MAX;
#ifdef TMO_LF_PLANT_TRIM_CAND /* tests/hooked/lf_trim_inbox.c must catch it */
	a0 = cand_pages;
#endif
#ifdef TMO_LF_PLANT_TRIM_SMALL /* tests/hooked/lf_trim_hold.c must catch it */
	a0 = a0 < 2 * GROW_PAGES_MIN ? a0 : 2 * GROW_PAGES_MIN;
#endif
	atomic_store_explicit(&p->trim_grow, a0, memory_order_relaxed);
	uint64_t kept = 0, gave = 0;
	uint64_t taken = bucket_by_page(e, hwm, cand, free_in, by_page, &kept);
	atomic_fetch_sub_explicit(&p->depot_nodes, taken, memory_order_relaxed);
	bucket_records(e, hwm, cand, free_in, by_page, &kept);
	plan_pages(hwm, free_in, cand, kept);
	LF_HOOK(trim, e);

	/* The nodes of pages that stay go back first (a refill meanwhile finds
	 * them), page by page, highest first, so the lowest are taken first;
	 * then the runs of pages the plan chose go back to the kernel. */
	for (uint32_t pg = hwm; pg-- > 0;)
		if (!cand[pg] && by_page[pg] != NULL)
			tmo__lf_depot_push(e, by_page[pg], free_in[pg]);
	for (uint32_t pg = 0; pg < hwm;) {
		if (!cand[pg]) {
			pg++;
			continue;
		}
		uint32_t first = pg;
		while (pg < hwm && cand[pg])
			pg++;
		gave += release_run(e, first, pg, by_page);
	}
	/* after the pushes: a refill that reads 0 here finds them */
	atomic_store_explicit(&p->trim_grow, 0, memory_order_release);
	atomic_fetch_add_explicit(&p->trimmed_pages, gave, memory_order_relaxed);
out:
	tmo__free(free_in);
	tmo__free(cand);
	tmo__free(by_page);
}

void tmo__lf_pool_trim(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	atomic_store_explicit(&p->trim_asked, 0, memory_order_relaxed);
	loose_collect(e);
	tmo__lf_cache_return(e, e->tt_rec);
	if (atomic_load_explicit(&p->depot_nodes, memory_order_relaxed) + tmo__lf_spares_count(e) >
	    TRIM_KEEP) {
		/* its arrays and a run's record are allocated and freed inside:
		 * no fork in between (lf.h, mem_lock) */
		pthread_mutex_lock(&e->mem_lock);
		trim_pages(e);
		pthread_mutex_unlock(&e->mem_lock);
	}
	/* counted once done: a reader that sees the count sees the depot and
	 * the pages as this trim left them */
	atomic_store_explicit(&p->trim_runs, atomic_load_explicit(&p->trim_runs, memory_order_relaxed) + 1,
	                      memory_order_release);
}
