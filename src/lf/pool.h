/*
 * The pool's own shared parts (pool.c: the arena and its growth; depot.c:
 * the depot and the caches; trim.c: giving memory back).  lf.h has the
 * pool's interface.
 */
#ifndef TMO_LF_POOL_H
#define TMO_LF_POOL_H

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
/* Free nodes in the depot that wake a sleeping timer thread to trim. */
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

/* Populate pages (pool.c): a chain of *count nodes, or NULL with *err
 * (TMO_EAGAIN past the soft bound or with the reservation used up,
 * TMO_ENOMEM for an injected fault). */
struct lf_node *tmo__lf_pool_grow(struct tmo *e, uint32_t *count, int *err);
/* The depot (depot.c). */
void tmo__lf_depot_push(struct tmo *e, struct lf_node *head, uint32_t count);
struct lf_node *tmo__lf_depot_take_all(struct tmo *e);
static inline struct lf_node *lf_chain_next(struct lf_node *head)
{
	return (struct lf_node *)atomic_load_explicit(&head->aux, memory_order_relaxed);
}

#endif /* TMO_LF_POOL_H */
