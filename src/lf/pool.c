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
 * and spare and in the depot (depot.c); a growth step is all the grower's.
 *
 * Flow control without waiting: the pool grows only while it holds fewer
 * than LF_SOFT_NODES plus twice the most arms a growth has found pending
 * at once (pending_peak); past that (nodes on
 * their way back through a timer thread that cannot keep up: mpsc, whose
 * one timer thread files every arm that outlives its ring) arm answers
 * TMO_EAGAIN at once, as it does when the reservation is used up; while a
 * trim holds the depot's nodes, a bounded step is allowed (may_grow).
 *
 * Giving memory back: when the timer thread is about to sleep (or a
 * cache spill wakes it, tmo__lf_cache_spill), it returns its own cache to the
 * depot (a free node in a cache pins its page), and when the depot and
 * the spares and homes hold more than TRIM_KEEP nodes and some page has
 * no node in use, it takes the depot and every spare and home: the nodes
 * of other pages go back at once (the depot's to the depot, a record's to
 * its home), every page whose 64 nodes
 * it then holds is returned with madvise(MADV_DONTNEED), and the rest go
 * back as chains of one page each, lowest on top (trim.c).  A given-back
 * page reads as zeros; populated again, its nodes start at a generation floor above
 * every generation they used: no stale (index, generation) matches.
 * Not while arms are refused growth (pressed): the load is still on, and
 * the pages would be populated again at once; the trim waits TRIM_DEFER
 * and looks again (timer.c, announce_sleep).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "count.h"
#include "pool.h"

int tmo__lf_pool_init(struct tmo *e)
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

void tmo__lf_pool_fini(struct tmo *e)
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

/* The soft bound: fewer than LF_SOFT_NODES plus twice the most arms found
 * pending at once by a growth (a racy maximum: a lost update only keeps
 * it lower).  Twice the pending arms alone refused a thread that began
 * beside one whose earlier timers were all cancelled: its spare held
 * their nodes, the pool was past the bound with little pending, and the
 * newcomer took that spare, both threads then refilling from the depot,
 * mixed (the throughput scenario's held case at two threads after one:
 * 51-78 ns a pair against 39-41 at one, the 2-vCPU AMD EPYC VM; with the
 * peak, 40-41).  Memory the engine once needed it may need again; what is
 * free is given back by the trim all the same.  Discounting the free
 * nodes of the spares instead let the wheel's pool pass sustain's limit
 * under load (3 runs of 5).  Growers that pass it together may each add a
 * step beyond it.  Past it,
 * a refill that found the depot empty while a trim holds nodes of pages it
 * may give back takes its pages from the trim's allowance (trim.c; *want
 * lowered to what it got), one growth step in all: the pool is never more
 * than a step past what it was when the trim began, and once the trim
 * has given pages back it is under its bound and grows as it would.
 * Refused then, the first arms
 * of a thread that began as a trim ran were answered TMO_EAGAIN with
 * 20,000 free nodes in the pool (a probe on the 2-vCPU AMD EPYC VM: two
 * threads after two others had exited, 8 runs of 40); with a fixed
 * allowance of 8 pages, 2 runs of 40 were refused at their 513th arm.
 * Growth not bounded by it swelled mpsc's pool to 27,136 nodes under CI's
 * load (the sustain scenario: a trimmer preempted in its window let
 * every refill of two busy threads grow). */
static int may_grow(struct tmo *e, uint32_t *want)
{
	struct lf_pool *p = &e->pool;
	uint64_t held = atomic_load_explicit(&p->populated_pages, memory_order_relaxed) * PAGE_NODES;
	uint64_t peak = atomic_load_explicit(&p->pending_peak, memory_order_relaxed);
	for (uint64_t now = tmo__lf_pending(e); now > peak;)
		if (atomic_compare_exchange_weak_explicit(&p->pending_peak, &peak, now,
		                                          memory_order_relaxed, memory_order_relaxed))
			peak = now;
	if (held < LF_SOFT_NODES + 2 * peak)
		return 1;
#ifdef TMO_LF_PLANT_TRIM_REFUSE /* tests/hooked/lf_trim_hold.c must catch it */
	return 0;
#else
	uint32_t a = atomic_load_explicit(&p->trim_grow, memory_order_acquire), got;
	do {
		if (a == 0)
			return 0;
		got = a < *want ? a : *want;
	} while (!atomic_compare_exchange_weak_explicit(&p->trim_grow, &a, a - got,
	                                                memory_order_acquire,
	                                                memory_order_acquire));
	*want = got;
	return 1;
#endif
}

/* Take up to `want` pages of a run given back earlier (grow_lock held).
 * Returns the count, 0 when there is none. */
static uint32_t reuse_take_locked(struct lf_pool *p, uint32_t want, uint32_t *first,
                                  uint64_t *floor)
{
	if (p->reuse == NULL) {
		ck_stack_entry_t *got = ck_stack_batch_pop_upmc(&p->released);
		p->reuse = got != NULL ? tmo_container_of(got, struct lf_run, link) : NULL;
	}
	struct lf_run *r = p->reuse;
	if (r == NULL)
		return 0;
	uint32_t pages = r->count < want ? r->count : want;
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

/* Claim up to `want` pages never populated, lock-free.  Returns the
 * count, 0 when the reservation is used up. */
static uint32_t fresh_claim(struct lf_pool *p, uint32_t want, uint32_t *first)
{
	uint64_t cap = p->reserved_nodes_cap / PAGE_NODES;
	uint32_t hwm = atomic_load_explicit(&p->hwm_pages, memory_order_relaxed), pages;
	/* the CAS releases: the trimmer reads hwm, then the nodes' states */
	do {
		if (hwm >= cap)
			return 0;
		pages = cap - hwm < want ? (uint32_t)(cap - hwm) : want;
	} while (!atomic_compare_exchange_weak_explicit(&p->hwm_pages, &hwm, hwm + pages,
	                                                memory_order_release,
	                                                memory_order_relaxed));
	*first = hwm;
	return pages;
}

/* A refill was refused growth: the timer thread's next trim waits
 * (timer.c, announce_sleep).  A load and a store, not an RMW: refusals
 * come from every producer at once under flow control, and the line stays
 * shared while the flag is up. */
static inline void pressed(struct lf_pool *p)
{
	if (!atomic_load_explicit(&p->pressed, memory_order_relaxed))
		atomic_store_explicit(&p->pressed, 1, memory_order_relaxed);
}

/* Populate pages: a chain of their nodes, *count of them.  NULL with *err
 * past the soft bound or with the reservation used up (TMO_EAGAIN), or
 * when a fault is injected (TMO_ENOMEM).  Never waits for another grower:
 * pages given back are reused when their lock is free at once (or nothing
 * else is left), else fresh pages are claimed with a CAS. */
struct lf_node *tmo__lf_pool_grow(struct tmo *e, uint32_t want, uint32_t *count, int *err)
{
	struct lf_pool *p = &e->pool;
	if (tmo__fault(TMO_FAULT_ALLOC)) {
		*err = TMO_ENOMEM;
		return NULL;
	}
	if (!may_grow(e, &want)) {
		pressed(p);
		*err = TMO_EAGAIN;
		return NULL;
	}
	uint32_t first = 0, pages = 0;
	uint64_t floor = 0;
	if (pthread_mutex_trylock(&p->grow_lock) == 0) {
		pages = reuse_take_locked(p, want, &first, &floor);
		pthread_mutex_unlock(&p->grow_lock);
	}
	if (pages == 0 && (pages = fresh_claim(p, want, &first)) == 0) {
		/* the reservation is used up: only given-back pages are left */
		pthread_mutex_lock(&p->grow_lock);
		pages = reuse_take_locked(p, want, &first, &floor);
		pthread_mutex_unlock(&p->grow_lock);
		if (pages == 0) {
			pressed(p);
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

uint64_t tmo__lf_pool_nodes(const struct tmo *e)
{
	return atomic_load_explicit(&e->pool.populated_pages, memory_order_relaxed) * PAGE_NODES;
}

uint64_t tmo__lf_pool_bytes(const struct tmo *e)
{
	return atomic_load_explicit(&e->pool.populated_pages, memory_order_relaxed) * PAGE_BYTES;
}

void tmo__lf_pool_each(struct tmo *e, void (*fn)(struct tmo *e, struct lf_node *n))
{
	uint32_t hwm = atomic_load_explicit(&e->pool.hwm_pages, memory_order_acquire);
	for (uint64_t i = 0; i < (uint64_t)hwm * PAGE_NODES; i++)
		fn(e, lf_node_at(e, (uint32_t)i));
}

