/*
 * Min-heap of intrusive nodes keyed by (deadline, seq), usable on its own:
 * the caller supplies deadlines, nothing here reads a clock or locks.
 *
 * Each node keeps its own position (`index`), so remove() of any node is
 * O(log n) at once: no lazy deletion, a cancelled timer leaves the heap when
 * it is cancelled.  Equal deadlines pop in push order (`seq`).  The array
 * shrinks when it is mostly empty, so a burst of cancelled timers does not
 * stay resident.
 *
 * Synchronization: none; the owner serializes every call.
 */
#ifndef TMO_HEAP_H
#define TMO_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* Results: 0, or one of these (the values of the enum tmo_error codes of the
 * same names, include/tmo/tmo.h; src/core/error.c asserts they agree). */
#define TMO_HEAP_EINVAL (-11)
#define TMO_HEAP_ENOMEM (-7)

/* Where the array's memory comes from: the heap's owner says (ds imports
 * nothing).  free must accept NULL, as free(3) does.  The library's engines
 * use tmo__heap_init (src/core/internal.h): this heap on the counted
 * allocator, so fault injection and leak accounting reach the array. */
struct tmo_heap_mem {
	void *(*alloc)(size_t n);
	void (*free)(void *p);
	/* May be NULL: then a resize allocates, copies and frees.  Given, it
	 * is realloc(3)'s contract (NULL on failure, the block unchanged). */
	void *(*realloc)(void *p, size_t n);
};

#define TMO_HEAP_NOT_IN UINT32_MAX
/* The arity engines should pass to init: 4-ary measured faster than binary
 * for push+remove at 1e3 and 1e6 live nodes and for push+pop at 1e6 (see
 * the commit that set it); binary wins only push+pop at 1e3, by ~15%. */
#define TMO_HEAP_DEFAULT_ARITY 4u

struct tmo_heap_node {
	int64_t deadline;
	uint64_t seq;
	uint32_t index; /* position in the array, TMO_HEAP_NOT_IN when out */
};

struct tmo_heap {
	struct tmo_heap_node **a;
	uint32_t n, cap, min_cap;
	unsigned log2_arity; /* 1: binary, 2: 4-ary */
	uint64_t next_seq;
	const struct tmo_heap_mem *mem;
};

/* arity 2 or 4; initial_cap slots are reserved (and kept as the floor the
 * array shrinks to); mem must outlive the heap.  Returns 0, TMO_HEAP_EINVAL
 * or TMO_HEAP_ENOMEM. */
int tmo__heap_init_with(struct tmo_heap *h, unsigned arity, uint32_t initial_cap,
                        const struct tmo_heap_mem *mem);
void tmo__heap_fini(struct tmo_heap *h);

static inline void tmo__heap_node_init(struct tmo_heap_node *n) { n->index = TMO_HEAP_NOT_IN; }
static inline int tmo__heap_contains(const struct tmo_heap_node *n)
{
	return n->index != TMO_HEAP_NOT_IN;
}
static inline uint32_t tmo__heap_size(const struct tmo_heap *h) { return h->n; }
static inline struct tmo_heap_node *tmo__heap_peek(const struct tmo_heap *h)
{
	return h->n ? h->a[0] : (struct tmo_heap_node *)0;
}

/* Insert with this deadline.  Returns 0, or TMO_HEAP_ENOMEM when the array
 * had to grow and could not (the node is then not in the heap). */
int tmo__heap_push(struct tmo_heap *h, struct tmo_heap_node *n, int64_t deadline);
/* Room for n nodes without growing (push cannot then fail below n):
 * grows by doublings, as push does.  Returns 0, or TMO_HEAP_ENOMEM (the
 * array unchanged). */
int tmo__heap_reserve(struct tmo_heap *h, uint32_t n);
/* Remove a node that is in the heap. */
void tmo__heap_remove(struct tmo_heap *h, struct tmo_heap_node *n);
/* Remove and return the minimum, or NULL when empty. */
struct tmo_heap_node *tmo__heap_pop(struct tmo_heap *h);
/* Bytes the heap's array holds now. */
uint64_t tmo__heap_bytes(const struct tmo_heap *h);

#endif
