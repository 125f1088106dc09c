/*
 * Memory of the lock-free core: nodes in one type-stable arena.
 *
 * The arena is one reservation (up to 1 GiB of address space, MAP_NORESERVE:
 * only touched pages cost memory) that stays mapped until destroy, so a
 * stale reader -- a cancel that read a timer's word just before its arm
 * fired and its node was freed -- may still load and CAS the node's state
 * word: it only loses the CAS.  Why not ck_epoch or QSBR: both cost the arm
 * or cancel path a store pair per call, and the fast path here has no other
 * shared write to hide it behind; a type-stable arena costs it nothing.
 *
 * Pages (64 nodes each) are populated on demand by producers, which never
 * wait for each other there: fresh pages are claimed by a CAS on the
 * high-water mark, pages given back are reused under grow_lock when a
 * trylock gets it (waited for only once the reservation is used up; the
 * timer thread never takes it).  Free nodes live in each record's cache
 * (at most LF_CACHE_MAX) and in the depot: a lock-free stack of chains of
 * LF_CHAIN nodes.  Its head word is a tag (high 32 bits, bumped by every
 * push and pop) and the top chain's index + 1 (low 32 bits), so a pop that
 * read a head which was popped and pushed again meanwhile loses its CAS;
 * reading a stale chain's link is safe because the arena is type-stable.
 *
 * Flow control without waiting: the pool grows only while it holds fewer
 * than LF_SOFT_NODES plus twice the pending arms; past that (nodes on
 * their way back through a timer thread that cannot keep up: mpsc, whose
 * one timer thread files every arm that outlives its ring) arm answers
 * TMO_EAGAIN at once, as it does when the reservation is used up.
 *
 * Giving memory back: when the timer thread is about to sleep, it returns
 * its own cache to the depot (a free node in a cache pins its page), and
 * when the depot holds more than TRIM_KEEP nodes it takes it, counts free
 * nodes per page, returns every page whose 64 nodes are all free with
 * madvise(MADV_DONTNEED), and puts the rest back as chains of one page
 * each.  A given-back page reads as zeros; when it is populated again its
 * nodes start at a generation floor above every generation they used, so
 * no stale (index, generation) matches a new arm.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lf.h"

#define NODE_SHIFT 6
#define PAGE_NODES 64u
#define PAGE_BYTES (PAGE_NODES << NODE_SHIFT)
/* The reservation tried first, and the least accepted. */
#define ARENA_MAX ((size_t)1 << (LF_IDX_BITS + NODE_SHIFT))
#define ARENA_MIN ((size_t)16 << 20)
/* Pages a growth step populates at most. */
#define GROW_PAGES 4u
/* Nodes the pool may hold whatever the pending count (256 KiB). */
#define LF_SOFT_NODES 4096u
/* Free nodes trim leaves in the depot. */
#define TRIM_KEEP (2u * PAGE_NODES)
/* Free nodes in the depot at which a sleeping timer thread is woken to
 * trim (lf_cache_spill). */
#define TRIM_WAKE (4u * PAGE_NODES)

/* Pages given back, waiting to be populated again. */
struct lf_run {
	ck_stack_entry_t link;
	uint32_t first, count; /* pages */
	uint64_t gen_floor;    /* above every generation these pages used */
};

static inline uint32_t page_of(const struct tmo *e, const struct lf_node *n)
{
	return lf_idx_of(e, n) / PAGE_NODES;
}

int lf_pool_init(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	if (tmo__fault(TMO_FAULT_ALLOC))
		return TMO_ENOMEM;
	for (size_t sz = ARENA_MAX; sz >= ARENA_MIN; sz /= 2) {
		void *m = mmap(NULL, sz, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m != MAP_FAILED) {
			p->arena = m;
			p->reserved_nodes = sz >> NODE_SHIFT;
			break;
		}
	}
	if (p->arena == NULL)
		return TMO_ENOMEM;
	uint64_t cap = tmo__node_cap();
	if (cap != 0 && cap < p->reserved_nodes)
		p->reserved_nodes_cap = (cap + PAGE_NODES - 1) / PAGE_NODES * PAGE_NODES;
	else
		p->reserved_nodes_cap = p->reserved_nodes;
	ck_stack_init(&p->released);
	ck_stack_init(&p->loose);
	if (pthread_mutex_init(&p->grow_lock, NULL) != 0)
		goto fail_map;
	return 0;
fail_map:
	munmap(p->arena, p->reserved_nodes << NODE_SHIFT);
	p->arena = NULL;
	return TMO_ESYS;
}

static void runs_free(ck_stack_entry_t *r)
{
	while (r != NULL) {
		ck_stack_entry_t *next = r->next;
		tmo__free(tmo_container_of(r, struct lf_run, link));
		r = next;
	}
}

void lf_pool_fini(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	runs_free(ck_stack_batch_pop_upmc(&p->released));
	while (p->reuse != NULL) {
		struct lf_run *r = p->reuse;
		p->reuse = r->link.next ? tmo_container_of(r->link.next, struct lf_run, link) : NULL;
		tmo__free(r);
	}
	pthread_mutex_destroy(&p->grow_lock);
	munmap(p->arena, p->reserved_nodes << NODE_SHIFT);
	p->arena = NULL;
}

/* ---- growth ------------------------------------------------------------------ */

/* The soft bound: fewer than LF_SOFT_NODES plus twice the pending arms.
 * Growers that pass it together may each add a step beyond it. */
static int may_grow(struct tmo *e)
{
	uint64_t held =
	    atomic_load_explicit(&e->pool.populated_pages, memory_order_relaxed) * PAGE_NODES;
	return held < LF_SOFT_NODES + 2 * lf_pending(e);
}

/* Take up to GROW_PAGES pages of a run given back earlier (grow_lock held).
 * Returns the count, 0 when there is none. */
static uint32_t reuse_take_locked(struct lf_pool *p, uint32_t *first, uint64_t *floor)
{
	if (p->reuse == NULL) {
		ck_stack_entry_t *got = ck_stack_batch_pop_upmc(&p->released);
		p->reuse = got != NULL ? tmo_container_of(got, struct lf_run, link) : NULL;
	}
	struct lf_run *r = p->reuse;
	if (r == NULL)
		return 0;
	uint32_t pages = r->count < GROW_PAGES ? r->count : GROW_PAGES;
	*first = r->first;
	*floor = r->gen_floor;
	r->first += pages;
	r->count -= pages;
	if (r->count == 0) {
		p->reuse = r->link.next ? tmo_container_of(r->link.next, struct lf_run, link) : NULL;
		tmo__free(r);
	}
	return pages;
}

/* Claim up to GROW_PAGES pages never populated, lock-free.  Returns the
 * count, 0 when the reservation is used up. */
static uint32_t fresh_claim(struct lf_pool *p, uint32_t *first)
{
	uint64_t cap = p->reserved_nodes_cap / PAGE_NODES;
	uint32_t hwm = atomic_load_explicit(&p->hwm_pages, memory_order_relaxed), pages;
	/* the CAS releases: the trimmer reads hwm, then the nodes' states */
	do {
		if (hwm >= cap)
			return 0;
		pages = cap - hwm < GROW_PAGES ? (uint32_t)(cap - hwm) : GROW_PAGES;
	} while (!atomic_compare_exchange_weak_explicit(&p->hwm_pages, &hwm, hwm + pages,
	                                                memory_order_release,
	                                                memory_order_relaxed));
	*first = hwm;
	return pages;
}

/* Populate pages: a chain of their nodes, *count of them.  NULL with *err
 * past the soft bound or with the reservation used up (TMO_EAGAIN), or
 * when a fault is injected (TMO_ENOMEM).  Never waits for another grower:
 * pages given back are reused when their lock is free at once (or nothing
 * else is left), else fresh pages are claimed with a CAS. */
static struct lf_node *grow(struct tmo *e, uint32_t *count, int *err)
{
	struct lf_pool *p = &e->pool;
	if (tmo__fault(TMO_FAULT_ALLOC)) {
		*err = TMO_ENOMEM;
		return NULL;
	}
	if (!may_grow(e)) {
		*err = TMO_EAGAIN;
		return NULL;
	}
	uint32_t first = 0, pages = 0;
	uint64_t floor = 0;
	if (pthread_mutex_trylock(&p->grow_lock) == 0) {
		pages = reuse_take_locked(p, &first, &floor);
		pthread_mutex_unlock(&p->grow_lock);
	}
	if (pages == 0 && (pages = fresh_claim(p, &first)) == 0) {
		/* the reservation is used up: only given-back pages are left */
		pthread_mutex_lock(&p->grow_lock);
		pages = reuse_take_locked(p, &first, &floor);
		pthread_mutex_unlock(&p->grow_lock);
		if (pages == 0) {
			*err = TMO_EAGAIN;
			return NULL;
		}
	}
	struct lf_node *head = NULL;
	uint32_t n = pages * PAGE_NODES;
	for (uint32_t i = n; i-- > 0;) {
		struct lf_node *x = lf_node_at(e, first * PAGE_NODES + i);
		if (floor != 0)
			atomic_store_explicit(&x->state, lf_st(floor, LF_FREE), memory_order_relaxed);
		x->free_next = head;
		head = x;
	}
	atomic_fetch_add_explicit(&p->populated_pages, pages, memory_order_relaxed);
	*count = n;
	return head;
}

/* ---- the depot ---------------------------------------------------------------- */

#define DEPOT_TAG ((uint64_t)1 << 32)

static struct lf_node *chain_next(struct lf_node *head)
{
	return (struct lf_node *)atomic_load_explicit(&head->aux, memory_order_relaxed);
}

static inline uint64_t depot_word(const struct tmo *e, uint64_t old, struct lf_node *top)
{
	return ((old & ~(DEPOT_TAG - 1)) + DEPOT_TAG) | (top != NULL ? lf_idx_of(e, top) + 1u : 0u);
}

/* Push a chain of count nodes.  The count is added first, so depot_nodes
 * never reads below what the stack holds. */
static void depot_push(struct tmo *e, struct lf_node *head, uint32_t count)
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
	                                                depot_word(e, w, chain_next(c)),
	                                                memory_order_acquire,
	                                                memory_order_acquire));
	*count = c->s.chain_n;
	atomic_fetch_sub_explicit(&p->depot_nodes, *count, memory_order_relaxed);
	return c;
}

/* Every chain at once (the trimmer); the caller subtracts what it counts. */
static struct lf_node *depot_take_all(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	uint64_t w = atomic_load_explicit(&p->depot, memory_order_acquire);
	while (!atomic_compare_exchange_weak_explicit(&p->depot, &w, depot_word(e, w, NULL),
	                                              memory_order_acquire,
	                                              memory_order_acquire))
		;
	return (uint32_t)w != 0 ? lf_node_at(e, (uint32_t)w - 1) : NULL;
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
	for (uint32_t left = count - LF_CHAIN; left > 0;) {
		uint32_t k = left < LF_CHAIN ? left : LF_CHAIN;
		struct lf_node *head = rest, *t = head;
		for (uint32_t i = 1; i < k; i++)
			t = t->free_next;
		rest = t->free_next;
		t->free_next = NULL;
		depot_push(e, head, k);
		left -= k;
	}
	return LF_CHAIN;
}

struct lf_node *lf_cache_refill(struct tmo *e, struct lf_rec *r, int *err)
{
	uint32_t count = 0;
	struct lf_node *c = depot_pop(e, &count);
	if (c == NULL && (c = grow(e, &count, err)) == NULL)
		return NULL;
	count = chain_trim(e, c, count);
	/* the chain joins whatever the cache holds (at most a few nodes) */
	struct lf_node *tail = c;
	while (tail->free_next != NULL)
		tail = tail->free_next;
	tail->free_next = r->cache;
	r->cache = c;
	r->cache_n += count;
	return c;
}

/* r's cache grew past LF_CACHE_MAX: its oldest nodes go to the depot, in
 * whole chains, and the newest (hot) stay.  Oldest, not newest: a cache
 * whose bottom never moved would keep a few nodes of early pages for as
 * long as the thread lives, and pin those pages (pool.c's trim gives back
 * only wholly free pages). */
void lf_cache_spill(struct tmo *e, struct lf_rec *r)
{
	uint32_t out = (r->cache_n - LF_CHAIN) / LF_CHAIN * LF_CHAIN, keep = r->cache_n - out;
	struct lf_node *tail = r->cache;
	for (uint32_t i = 1; i < keep; i++)
		tail = tail->free_next;
	struct lf_node *old = tail->free_next;
	tail->free_next = NULL;
	r->cache_n = keep;
	while (old != NULL) {
		struct lf_node *head = old, *t = head;
		for (uint32_t i = 1; i < LF_CHAIN; i++)
			t = t->free_next;
		old = t->free_next;
		t->free_next = NULL;
		depot_push(e, head, LF_CHAIN);
	}
	/* The timer thread gives pages back when it goes to sleep: frees made
	 * while it sleeps (the cancels of timers it never had to look at)
	 * would wait for its next wake-up, a timeout away (guarantee 6).  Past
	 * TRIM_WAKE free nodes it is woken, once until it has trimmed. */
	struct lf_pool *p = &e->pool;
	if (LF_UNLIKELY(atomic_load_explicit(&e->tickw, memory_order_relaxed) & LF_TW_SLEEPING) &&
	    atomic_load_explicit(&p->depot_nodes, memory_order_relaxed) > TRIM_WAKE &&
	    !atomic_load_explicit(&p->trim_asked, memory_order_relaxed)) {
		atomic_store_explicit(&p->trim_asked, 1, memory_order_relaxed);
		lf_wake_for(e, 0);
	}
}

void lf_cache_return(struct tmo *e, struct lf_rec *r)
{
	while (r->cache != NULL) {
		struct lf_node *head = r->cache, *tail = head;
		uint32_t k = 1;
		while (k < LF_CHAIN && tail->free_next != NULL) {
			tail = tail->free_next;
			k++;
		}
		r->cache = tail->free_next;
		tail->free_next = NULL;
		depot_push(e, head, k);
	}
	r->cache_n = 0;
}

void lf_free_bare(struct tmo *e, struct lf_node *n)
{
	ck_stack_push_upmc(&e->pool.loose, &n->link);
}

struct lf_node *lf_alloc_bare(struct tmo *e, int *err)
{
	uint32_t count = 0;
	struct lf_node *c = depot_pop(e, &count);
	if (c == NULL && (c = grow(e, &count, err)) == NULL)
		return NULL;
	if (count > 1)
		depot_push(e, c->free_next, count - 1);
	c->free_next = NULL;
	return c;
}

/* ---- giving memory back (timer thread) ----------------------------------------- */

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

/* Empty the depot into buckets by page: by_page[pg] lists page pg's free
 * nodes, free_in[pg] of them; nodes of pages populated after hwm was read go
 * to *late (*late_n of them).  Returns the number of nodes taken. */
static uint64_t bucket_by_page(struct tmo *e, uint32_t hwm, uint8_t *free_in,
                               struct lf_node **by_page, struct lf_node **late, uint32_t *late_n)
{
	uint64_t taken = 0;
	for (struct lf_node *c = depot_take_all(e), *next_chain; c != NULL; c = next_chain) {
		next_chain = chain_next(c);
		for (struct lf_node *n = c, *next; n != NULL; n = next, taken++) {
			next = n->free_next;
			uint32_t pg = page_of(e, n);
			struct lf_node **list = pg < hwm ? &by_page[pg] : late;
			n->free_next = *list;
			*list = n;
			if (pg < hwm)
				free_in[pg]++;
			else
				(*late_n)++;
		}
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
			depot_push(e, by_page[q], PAGE_NODES);
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

void lf_pool_trim(struct tmo *e)
{
	struct lf_pool *p = &e->pool;
	atomic_store_explicit(&p->trim_asked, 0, memory_order_relaxed);
	loose_collect(e);
	lf_cache_return(e, e->tt_rec);
	if (atomic_load_explicit(&p->depot_nodes, memory_order_relaxed) <= TRIM_KEEP)
		return;
	uint32_t hwm = atomic_load_explicit(&p->hwm_pages, memory_order_acquire);
	uint8_t *free_in = tmo__calloc(hwm, 1);
	struct lf_node **by_page = tmo__calloc(hwm, sizeof *by_page);
	if (free_in == NULL || by_page == NULL) {
		tmo__free(free_in);
		tmo__free(by_page);
		return; /* try again next time */
	}
	struct lf_node *late = NULL;
	uint32_t late_n = 0;
	uint64_t taken = bucket_by_page(e, hwm, free_in, by_page, &late, &late_n);
	atomic_fetch_sub_explicit(&p->depot_nodes, taken, memory_order_relaxed);

	/* Give back runs of wholly free pages; chain the rest page by page,
	 * pushed from the highest page down, so that the lowest pages are
	 * taken first: live nodes, and the free nodes caches keep (which pin
	 * their pages), gather in few low pages, and the pages above them come
	 * free together for the next trim. */
	uint64_t kept = 0, gave = 0;
	if (late != NULL)
		depot_push(e, late, late_n); /* may exceed LF_CHAIN: fine */
	for (uint32_t pg = 0; pg < hwm;) {
		if (free_in[pg] != PAGE_NODES || kept < TRIM_KEEP) {
			kept += free_in[pg];
			pg++;
			continue;
		}
		uint32_t first = pg;
		while (pg < hwm && free_in[pg] == PAGE_NODES)
			pg++;
		gave += release_run(e, first, pg, by_page);
		for (uint32_t q = first; q < pg; q++) /* given back, or pushed */
			by_page[q] = NULL;
	}
	for (uint32_t pg = hwm; pg-- > 0;)
		if (by_page[pg] != NULL)
			depot_push(e, by_page[pg], free_in[pg]);
	atomic_fetch_add_explicit(&p->trimmed_pages, gave, memory_order_relaxed);
	tmo__free(free_in);
	tmo__free(by_page);
}

uint64_t lf_pool_nodes(const struct tmo *e)
{
	return atomic_load_explicit(&e->pool.populated_pages, memory_order_relaxed) * PAGE_NODES;
}

uint64_t lf_pool_bytes(const struct tmo *e)
{
	return atomic_load_explicit(&e->pool.populated_pages, memory_order_relaxed) * PAGE_BYTES;
}

void lf_pool_each(struct tmo *e, void (*fn)(struct tmo *e, struct lf_node *n))
{
	uint32_t hwm = atomic_load_explicit(&e->pool.hwm_pages, memory_order_acquire);
	for (uint64_t i = 0; i < (uint64_t)hwm * PAGE_NODES; i++)
		fn(e, lf_node_at(e, (uint32_t)i));
}

