/*
 * The lock-free inbox core shared by the `mpsc` and `wheel` engines.
 *
 * Overview
 * --------
 * arm and cancel take no lock.  Each arm takes an engine-owned node from a
 * thread-local cache, fills it with the timeout and the arm time (the TSC,
 * ~10 ns) and pushes it onto a Concurrency Kit stack (the inbox).  ONE timer
 * thread owns the ordered structure (a heap or a wheel, behind struct
 * tmo__ib_sched): it takes the whole inbox with one exchange, converts each
 * arm's TSC to CLOCK_MONOTONIC (rounded up: see "dating arms" in inbox.c),
 * files the nodes with deadline = arm time + timeout, collects due nodes,
 * then runs their callbacks.
 *
 * Nodes, never the caller's timer, live in the inbox and the structure, so
 * once cancel returns the engine holds no reference to the timer.  Nodes come
 * from slabs (allocated at create, grown rarely under a mutex); the timer
 * thread is the only place a node is ever released, so it packs released
 * nodes into magazines of TMO__IB_MAG node pointers and pushes whole
 * magazines onto a second CK stack; a producer refills its cache with one
 * magazine and gives the empty one back on a third.
 *
 * Flow control: the pool grows freely up to a soft cap (TMO__IB_SOFT_NODES,
 * or twice the pending timers); beyond it a producer that finds no free
 * magazine asks the timer thread for its part-filled one and sleeps until
 * the thread recycles nodes, instead of growing: arm+cancel flat out holds
 * bounded memory (one timer thread touches every node, so producers that
 * outrun it would otherwise grow the pool without end).  A parked timer
 * thread never makes a producer wait: the pool grows.  One inside a callback
 * for >= 1 ms, or making no progress for 50 ms, grows the pool too, but only
 * up to twice the soft cap: past that, a producer waits for recycling even
 * behind a long callback (bounded memory wins; a preempted timer thread
 * looks exactly like a long callback).
 *
 * Exactly once: the node's state word (a generation and a state) has exactly
 * one winner between cancel and fire:
 *
 *   QUEUED --(timer thread files it)--> IN_STRUCT --(due)--> FIRING --> FREE
 *     |                                     |
 *     cancel: CANCELLED                     cancel: CANCEL_PENDING, and the
 *     (dropped when popped)                 canceller pushes the node itself
 *                                           so it leaves the structure at once
 *
 * The generation changes at every arm, so a recycled node is recognised.
 *
 * Synchronization: as in include/tmo/tmo.h.  Nothing here is called with a
 * lock held on the arm/cancel fast paths; the slow paths (pool growth, a
 * thread using more than TMO__IB_SLOTS engines, thread exit, stats) take a
 * mutex.
 */
#ifndef TMO_INBOX_H
#define TMO_INBOX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <ck_stack.h>

#include "heap.h"
#include "internal.h"
#include "wheel.h"

/* Nodes per magazine, and the most a thread-local cache holds. */
#define TMO__IB_MAG 64
/* Pool size up to which producers grow it rather than wait for recycling. */
#define TMO__IB_SOFT_NODES 4096
/* Engines one thread keeps a node cache for at once (more: one is evicted,
 * under a global mutex). */
#define TMO__IB_SLOTS 4

/* Where the timer thread keeps a node (private to the timer thread; kept in
 * the low bits of tmo__ib_node.aux). */
enum tmo__ib_where {
	TMO__IB_NOWHERE = 0,
	TMO__IB_IN_STRUCT = 1, /* in the heap / wheel */
	TMO__IB_UNFILED = 2,   /* the structure could not grow: on the retry list */
	TMO__IB_DROP = 3,      /* on the retry list but cancelled: release it there */
};

/* One cache line.  A producer writes link, state, timer and s.when; the
 * timer thread reads link and state of every node it pops and writes
 * nothing more to a node that was cancelled while queued (the common case):
 * free nodes travel in magazines (arrays of pointers), not through a link in
 * the node, so recycling a node costs the timer thread one read miss. */
struct tmo__ib_node {
	/* inbox link (producers) */
	ck_stack_entry_t link;
	/* generation << 3 | state; the only word cancel and fire race on */
	_Atomic uint64_t state;
	struct tmo_timer *timer;
	/* timer thread: next node on the due or retry list | enum tmo__ib_where */
	uintptr_t aux;
	union {
		struct {
			int64_t timeout; /* as given to arm */
			uint64_t stamp;  /* when arm ran: TSC, or clock ns */
		} q;                     /* while queued */
		int64_t when;            /* deadline, while unfiled */
		struct tmo_heap_node heap;
		struct tmo_wheel_node wheel;
	} s;
} __attribute__((aligned(64)));

/* A magazine: up to TMO__IB_MAG free nodes, handed between the timer thread
 * (fills them) and producers (each keeps one as its cache). */
struct tmo__ib_mag {
	ck_stack_entry_t link;
	uint32_t count;
	struct tmo__ib_node *n[TMO__IB_MAG];
};

/* The ordered structure the timer thread owns; every call comes from the
 * timer thread (or create/destroy), so none needs synchronization. */
struct tmo__ib_sched {
	size_t size; /* bytes of its state, allocated inside the engine */
	/* Returns 0, TMO_EINVAL or TMO_ENOMEM. */
	int (*init)(void *s, int64_t resolution_ns, int64_t now_ns);
	void (*fini)(void *s);
	/* Returns 0, or TMO_ENOMEM (the node is then not filed). */
	int (*insert)(void *s, struct tmo__ib_node *n, int64_t deadline);
	void (*remove)(void *s, struct tmo__ib_node *n);
	/* Earliest time a node may be due (a lower bound); INT64_MAX if empty. */
	int64_t (*next_deadline)(const void *s);
	/* Move every node due at now out of the structure and hand each to
	 * due(ctx, node), in due order. */
	void (*collect)(void *s, int64_t now, void (*due)(void *ctx, struct tmo__ib_node *n),
	                void *ctx);
	/* Bytes it holds beyond its fixed size. */
	uint64_t (*bytes)(const void *s);
	/* Nodes filed now. */
	uint64_t (*count)(const void *s);
	/* NULL if collect() hands nodes out in deadline order; else a node's
	 * deadline, and the core sorts due batches by it. */
	int64_t (*deadline)(const struct tmo__ib_node *n);
};

struct tmo__ib_params {
	const struct tmo_engine_ops *ops;
	const struct tmo__ib_sched *sched;
	int64_t resolution_ns; /* passed to sched->init */
	/* While inbox traffic keeps coming, the timer thread polls the inbox
	 * every nap_ns instead of asking producers to wake it; 0 = never (every
	 * push onto an empty inbox wakes a sleeping timer thread). */
	int64_t nap_ns;
};

int tmo__ib_create(const struct tmo__ib_params *p, const struct tmo_config *cfg,
                   struct tmo **out);
void tmo__ib_destroy(struct tmo *e);
int tmo__ib_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                void *arg);
int tmo__ib_cancel(struct tmo *e, struct tmo_timer *t);
int tmo__ib_stats(struct tmo *e, struct tmo_stats *out);
int tmo__ib_park(struct tmo *e, int on);

/* Test view (tests/unit_inbox.c): nodes filed in the structure as of the
 * timer thread's last loop, and slabs allocated. */
struct tmo__ib_debug {
	uint64_t filed;
	uint64_t slabs;
	uint64_t cache_count; /* nodes in the calling thread's cache for e */
	uint64_t waits;       /* times a producer waited for recycling */
};
void tmo__ib_debug(struct tmo *e, struct tmo__ib_debug *out);
/* The node a timer was last armed with, and that arm's generation. */
void *tmo__ib_timer_node(const struct tmo_timer *t, uint64_t *gen);

#endif
