/*
 * The lock-free core's node model (lf.h describes the whole core): a
 * node's state word, the timer's word that names its node, and the node,
 * one cache line.  The state word has exactly one winner among cancel,
 * steal, spill and fire; lf.h's diagram gives its transitions.
 */
#ifndef TMO_LF_NODE_H
#define TMO_LF_NODE_H

#include <stdatomic.h>
#include <stdint.h>

#include <ck_stack.h>

#include "core/internal.h"
#include "ds/heap.h"
#include "ds/wheel.h"

/* ---- node state and the timer's word -------------------------------------- */

enum lf_state {
	LF_FREE = 0,
	LF_RING = 1,           /* armed, in its owner's ring */
	LF_QUEUED = 2,         /* armed, in the inbox */
	LF_IN_STRUCT = 3,      /* armed, filed in a base */
	LF_FIRING = 4,         /* its callback runs (or is about to) */
	LF_CANCELLED = 5,      /* prevented before it was filed */
	LF_CANCEL_PENDING = 6, /* prevented while filed: leaving its base */
	LF_DROPPED = 7,        /* prevented in transit (QUEUED): its holder frees it */
};

/* Generations are 38 bits wide, in the top bits of both the state word and
 * the timer's word (so that they wrap by themselves, and a RING state plus
 * the node's index is the arm's PENDING word): a stale (index, generation)
 * could only match after 2^38 arms of one node while its reader sleeps
 * between two instructions (about an hour of nothing but arm+cancel on
 * that node). */
#define LF_GEN_SHIFT 26
#define LF_GEN_MASK ((UINT64_C(1) << (64 - LF_GEN_SHIFT)) - 1)
#define LF_IDX_BITS 24 /* at most 2^24 nodes: a 1 GiB arena */
#define LF_LOW_MASK ((UINT64_C(1) << LF_GEN_SHIFT) - 1)

/* A state word: generation << 26 | enum lf_state. */
static inline uint64_t lf_st(uint64_t gen, unsigned st) { return gen << LF_GEN_SHIFT | st; }
static inline unsigned lf_st_of(uint64_t s) { return (unsigned)(s & 7u); }
static inline uint64_t lf_gen_of(uint64_t s) { return s >> LF_GEN_SHIFT; }
/* The state of a free node's next arm: its generation + 1, RING. */
static inline uint64_t lf_next_ring(uint64_t s) { return ((s | LF_LOW_MASK) + 1) | LF_RING; }

enum lf_outcome { LF_NONE = 0, LF_PENDING = 1, LF_FIRED = 2, LF_CANCELLED_OUT = 3 };

/* The timer's word: generation << 26 | node index << 2 | outcome.  All-zero
 * is an idle timer (tmo_timer_init).  An arm's PENDING word is its node's
 * RING state plus index << 2 (LF_PENDING == LF_RING). */
static inline uint64_t lf_word(uint32_t idx, uint64_t gen, unsigned out)
{
	return gen << LF_GEN_SHIFT | (uint64_t)idx << 2 | out;
}
static inline unsigned lf_word_out(uint64_t w) { return (unsigned)(w & 3u); }
static inline uint32_t lf_word_idx(uint64_t w)
{
	return (uint32_t)(w >> 2) & ((1u << LF_IDX_BITS) - 1);
}
static inline uint64_t lf_word_gen(uint64_t w) { return w >> LF_GEN_SHIFT; }
_Static_assert((int)LF_PENDING == (int)LF_RING, "a RING state plus the index is the word");
static inline _Atomic uint64_t *lf_timer_word(struct tmo_timer *t)
{
	return (_Atomic uint64_t *)(void *)&t->tmo_private[0];
}

/* ---- nodes ------------------------------------------------------------------- */

/* Where a filed node is (aux's low bits; the rest is its per-thread base). */
enum lf_where {
	LF_NOWHERE = 0,
	LF_IN_TT = 1,     /* the timer thread's base: aux & LF_HOME_MASK is the
	                   * record whose ring it was stolen from, or NULL */
	LF_IN_THREAD = 2, /* a per-thread base: aux & ~3 is it */
};
/* The record an LF_IN_TT node's aux names (64-byte aligned: the low bits
 * are free): where its node goes back when the timer thread frees it
 * after a cancel (depot.c, Homes). */
#define LF_HOME_MASK (~(uintptr_t)63)
/* aux of a node in the timer thread's base (LF_IN_TT) of a near/far
 * structure: it waits in the far wheel, not the heap (schedule.c).  Only
 * the timer thread writes it; a canceller reads aux's low bits alone. */
#define LF_FAR ((uintptr_t)4)

struct lf_rec;
struct lf_base;

/* One cache line. */
struct lf_node {
	_Atomic uint64_t state;
	struct tmo_timer *timer;
	union {
		ck_stack_entry_t link;   /* inbox, a base's cancel stack */
		struct lf_node *free_next; /* a free list (cache, depot chain) */
	};
	/* enum lf_where | base or unfiled link; written before the node is
	 * published IN_STRUCT, so a canceller that wins reads it */
	_Atomic uintptr_t aux;
	union {
		struct {
			_Atomic int64_t timeout;
			_Atomic uint64_t stamp; /* clock.c: the TSC at arm */
		} q;                            /* RING, QUEUED */
		struct tmo_heap_node heap;      /* IN_STRUCT (mpsc) */
		struct tmo_wheel_node wheel;    /* IN_STRUCT (wheel) */
		struct {
			int64_t when;
		} unfiled;                      /* timer thread: its base could not grow */
		struct {
			/* the soon list's link; the deadline stays where the
			 * structure keeps it (sched->deadline) */
			struct lf_node *next;
		} soon;
		uint32_t chain_n;               /* FREE: a free chain's length (its head) */
	} s;
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct lf_node) == 64, "a node is one cache line");

static inline struct lf_node *lf_node_of_link(ck_stack_entry_t *l)
{
	return tmo_container_of(l, struct lf_node, link);
}

#endif /* TMO_LF_NODE_H */
