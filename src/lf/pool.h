/*
 * pool.c: the arena the nodes live in (type-stable, never unmapped while
 * the engine lives) and its growth; below, the pool's own parts that
 * depot.c and trim.c share with it: its sizes, the runs of pages given
 * back, growing.
 */
#ifndef TMO_LF_POOL_H
#define TMO_LF_POOL_H

#include "lf.h"

int tmo__lf_pool_init(struct tmo *e);
void tmo__lf_pool_fini(struct tmo *e);
static inline struct lf_node *lf_node_at(const struct tmo *e, uint32_t idx)
{
	return (struct lf_node *)(void *)(e->pool.arena + ((size_t)idx << 6));
}
static inline uint32_t lf_idx_of(const struct tmo *e, const struct lf_node *n)
{
	return (uint32_t)((uint64_t)((const char *)n - e->pool.arena) >> 6);
}
uint64_t tmo__lf_pool_bytes(const struct tmo *e);
uint64_t tmo__lf_pool_nodes(const struct tmo *e);
/* Every node in a populated page, for destroy. */
void tmo__lf_pool_each(struct tmo *e, void (*fn)(struct tmo *e, struct lf_node *n));

#define NODE_SHIFT 6
#define PAGE_NODES 64u
#define PAGE_BYTES (PAGE_NODES << NODE_SHIFT)
/* The reservation tried first, and the least accepted. */
#define ARENA_MAX ((size_t)1 << (LF_IDX_BITS + NODE_SHIFT))
#define ARENA_MIN ((size_t)16 << 20)
/* Pages a growth step populates: a record's first 4 (16 KiB), each next
 * step twice its last, up to 16 (64 KiB); all of it the grower's
 * (depot.c, Spares).  Two threads whose held nodes shared 16 KiB runs of
 * pages ran each pair at twice the cost of threads with engines of their
 * own (2-vCPU AMD EPYC VM, two threads holding 20,000 timers each: 60 ns
 * against 33 ns a pair); from 64 KiB runs, as fast as apart.  A thread
 * that arms a few timers still costs one small step. */
#define GROW_PAGES_MIN 4u
#define GROW_PAGES_MAX 16u
/* Nodes the pool may hold whatever the pending count (256 KiB). */
#define LF_SOFT_NODES 4096u
/* Free nodes trim leaves in the depot. */
#define TRIM_KEEP (2u * PAGE_NODES)

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

/* Populate up to `want` pages (pool.c): a chain of *count nodes, or NULL with *err
 * (TMO_EAGAIN past the soft bound or with the reservation used up,
 * TMO_ENOMEM for an injected fault). */
struct lf_node *tmo__lf_pool_grow(struct tmo *e, uint32_t want, uint32_t *count, int *err);

#endif /* TMO_LF_POOL_H */
