/*
 * Intrusive d-ary min-heap (d = 2 or 4), see heap.h.
 *
 * Index math is shift-based: with k = log2(d),
 *   parent(i)      = (i - 1) >> k
 *   first_child(i) = (i << k) + 1
 * Every node stores its own array index, kept exact by every move, so
 * remove() needs no search.
 *
 * Memory: the array doubles when full and halves when fewer than a quarter
 * of its slots are used (never below min_cap), through the owner's realloc
 * where it gives one: glibc moves a large block with mremap, so a heap
 * growing to 1e6 nodes neither copies its array nor faults its old pages in
 * again (an allocate-copy-free doubling did both, on the timer thread of
 * mpsc while it filed a million arms).  The factor-of-two gap between
 * the grow and the shrink points keeps a push/remove pair at a boundary from
 * reallocating every time.  A failed shrink is harmless (the larger array is
 * kept), so only push can report TMO_HEAP_ENOMEM.
 */
#include <string.h>

#include "ds/heap.h"

/* Largest capacity: indices must stay below TMO_HEAP_NOT_IN, and doubling
 * must not overflow uint32_t. */
#define HEAP_MAX_CAP (UINT32_C(1) << 31)
/* First allocation when the heap was created with initial_cap 0. */
#define HEAP_FIRST_CAP 8u

/* (deadline, seq) order: equal deadlines keep push order. */
static inline int before(const struct tmo_heap_node *x, const struct tmo_heap_node *y)
{
	return x->deadline < y->deadline || (x->deadline == y->deadline && x->seq < y->seq);
}

static int resize(struct tmo_heap *h, uint32_t cap)
{
	struct tmo_heap_node **a = NULL;
	if (cap != 0 && h->a != NULL && h->mem->realloc != NULL) {
		a = h->mem->realloc(h->a, (size_t)cap * sizeof *a);
		if (a == NULL)
			return TMO_HEAP_ENOMEM;
		h->a = a;
		h->cap = cap;
		return 0;
	}
	if (cap != 0) {
		a = h->mem->alloc((size_t)cap * sizeof *a);
		if (a == NULL)
			return TMO_HEAP_ENOMEM;
		if (h->n != 0)
			memcpy(a, h->a, (size_t)h->n * sizeof *a);
	}
	h->mem->free(h->a);
	h->a = a;
	h->cap = cap;
	return 0;
}

int tmo__heap_init_with(struct tmo_heap *h, unsigned arity, uint32_t initial_cap,
                        const struct tmo_heap_mem *mem)
{
	memset(h, 0, sizeof *h);
	h->mem = mem;
	if (arity == 2)
		h->log2_arity = 1;
	else if (arity == 4)
		h->log2_arity = 2;
	else
		return TMO_HEAP_EINVAL;
	if (initial_cap > HEAP_MAX_CAP)
		return TMO_HEAP_EINVAL;
	h->min_cap = initial_cap;
	return resize(h, initial_cap);
}

void tmo__heap_fini(struct tmo_heap *h)
{
	/* Nodes still inside are the caller's; they are only marked out. */
	for (uint32_t i = 0; i < h->n; i++)
		h->a[i]->index = TMO_HEAP_NOT_IN;
	h->mem->free(h->a);
	h->a = NULL;
	h->n = h->cap = 0;
}

/* Put x in slot i: every move keeps the node's own index exact. */
static inline void set_slot(struct tmo_heap_node **a, uint32_t i, struct tmo_heap_node *x)
{
	a[i] = x;
	x->index = i;
}

/* Move node x up from hole i until its parent is not after it. */
static void sift_up(struct tmo_heap *h, uint32_t i, struct tmo_heap_node *x)
{
	struct tmo_heap_node **a = h->a;
	const unsigned k = h->log2_arity;
	while (i > 0) {
		uint32_t p = (i - 1) >> k;
		if (!before(x, a[p]))
			break;
		set_slot(a, i, a[p]);
		i = p;
	}
	set_slot(a, i, x);
}

/* Move node x down from hole i until no child is before it. */
static void sift_down(struct tmo_heap *h, uint32_t i, struct tmo_heap_node *x)
{
	struct tmo_heap_node **a = h->a;
	const unsigned k = h->log2_arity;
	const uint32_t n = h->n;
	for (;;) {
		/* 64-bit: (i << k) + 1 may pass UINT32_MAX for the last levels. */
		uint64_t c = ((uint64_t)i << k) + 1;
		if (c >= n)
			break;
		uint64_t end = c + (UINT64_C(1) << k);
		if (end > n)
			end = n;
		uint32_t m = (uint32_t)c;
		for (uint32_t j = m + 1; j < (uint32_t)end; j++)
			if (before(a[j], a[m]))
				m = j;
		if (!before(a[m], x))
			break;
		set_slot(a, i, a[m]);
		i = m;
	}
	set_slot(a, i, x);
}

int tmo__heap_reserve(struct tmo_heap *h, uint32_t n)
{
	if (n <= h->cap)
		return 0;
	if (n > HEAP_MAX_CAP)
		return TMO_HEAP_ENOMEM;
	uint32_t cap = h->cap ? h->cap : (h->min_cap ? h->min_cap : HEAP_FIRST_CAP);
	while (cap < n)
		cap *= 2; /* cap < n <= 2^31: no overflow */
	return resize(h, cap);
}

int tmo__heap_push(struct tmo_heap *h, struct tmo_heap_node *n, int64_t deadline)
{
	if (h->n == h->cap) { /* full: one doubling (the first: min_cap) */
		int rc = tmo__heap_reserve(h, h->n + 1);
		if (rc != 0) {
			n->index = TMO_HEAP_NOT_IN;
			return rc;
		}
	}
	n->deadline = deadline;
	n->seq = h->next_seq++;
	sift_up(h, h->n++, n);
	return 0;
}

static void maybe_shrink(struct tmo_heap *h)
{
	if (h->cap > h->min_cap && h->n < h->cap / 4) {
		uint32_t cap = h->cap / 2;
		if (cap < h->min_cap)
			cap = h->min_cap;
		(void)resize(h, cap); /* on failure the larger array stays */
	}
}

void tmo__heap_remove(struct tmo_heap *h, struct tmo_heap_node *n)
{
	uint32_t i = n->index;
	struct tmo_heap_node *last = h->a[--h->n];
	n->index = TMO_HEAP_NOT_IN;
	if (last != n) {
		/* The last node fills the hole: it may belong above or below it. */
		if (i > 0 && before(last, h->a[(i - 1) >> h->log2_arity]))
			sift_up(h, i, last);
		else
			sift_down(h, i, last);
	}
	maybe_shrink(h);
}

struct tmo_heap_node *tmo__heap_pop(struct tmo_heap *h)
{
	if (h->n == 0)
		return NULL;
	struct tmo_heap_node *top = h->a[0];
	tmo__heap_remove(h, top);
	return top;
}

uint64_t tmo__heap_bytes(const struct tmo_heap *h)
{
	return (uint64_t)h->cap * sizeof *h->a;
}
