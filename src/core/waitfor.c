/*
 * Waits for callbacks, across engines: the refusal of a cancel that would
 * deadlock (include/tmo/tmo.h, TMO_EDEADLK; the API is in core/internal.h).
 *
 * The graph
 * ---------
 * A node is a thread that runs callbacks (an engine's thread).  It has a
 * generation `gen`, odd while a callback runs on it (tmo__cb_begin and
 * tmo__cb_end bump it), so (node, gen) names one invocation of a callback:
 * a tmo__cbref.  An edge is a thread's `edge` word: the invocation that
 * thread waits for in a cancel (0: none).  Only a thread that runs a
 * callback can be waited for, so only a thread inside a callback can close
 * a cycle: a cancel from any other thread never publishes, never walks and
 * is never refused.
 *
 * The check (tmo__wait_begin), by a thread C inside invocation c that is
 * about to wait for invocation (R, g):
 *   1. publish C.edge = (R, g) (seq_cst);
 *   2. walk: at node X with expected generation x, read X.gen, X.edge,
 *      X.gen again; if either read is not x, invocation x has returned
 *      (and whoever waited for it is being released): no cycle through
 *      here.  An empty edge ends the chain: no cycle.  An edge to (C, c)
 *      closes the cycle: withdraw C.edge and refuse.  Else follow it.
 * An edge read between two equal reads of X.gen was published inside
 * invocation x: a thread publishes only inside its callback and withdraws
 * before that callback returns, and gen is stored with release and read
 * with acquire, so an edge of a later invocation would show the later gen
 * on the second read.
 *
 * Why a real cycle is always refused (Dekker).  Take the cancels of a cycle
 * that would deadlock, and among their publications (step 1, seq_cst) the
 * last in the single total order of seq_cst operations, by thread P.  P's
 * walk (step 2, seq_cst loads, after its publication) sees every other
 * edge of the cycle published, none withdrawn (a waiter withdraws only when
 * its wait ends, and in a deadlock none ends, or when it is refused, and
 * then there is no deadlock), and every invocation on it still running (each
 * is blocked in its own cancel): P finds the cycle and is refused.  Two (or
 * more) members closing a cycle at the same moment may both be refused:
 * each saw the other's edge, and had the other not been refused too, its
 * own wait would have deadlocked.  A refusal is never given otherwise: along
 * the chain C -> R1 -> ... -> Rk -> C, Rk waits for C's own running
 * invocation and cannot stop waiting (but by its own refusal), so Rk stays
 * in its invocation, so R(k-1)'s wait cannot end, and so on back to R1: at
 * the moment C reads Rk's edge, every edge it read is still there.
 *
 * Threads that exit.  Nodes live in chunks that are never freed, so a
 * stale edge can always be read.  A thread's node goes back to a free list
 * when the thread exits (a pthread key's destructor), and its gen keeps
 * counting when another thread takes it: an edge to an invocation of a
 * thread that has gone never matches again.  The gen in a ref has 40 bits
 * (2^39 callbacks per node before one could match by wrapping); the node
 * index 24 (16 M threads running callbacks at once).
 *
 * A cycle the canceller is not part of (waits that never check: an engine
 * not wired yet) would make the walk go round forever: it stops after as
 * many steps as there are nodes, a path no simple chain is longer than.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/internal.h"

#define GEN_BITS TMO__WF_GEN_BITS
#define GEN_MASK ((UINT64_C(1) << GEN_BITS) - 1)
#define CHUNK_NODES 1024u
#define MAX_CHUNKS 16383u /* (MAX_CHUNKS * CHUNK_NODES + 1) < 2^24 */

static _Atomic(struct tmo__wf_node *) chunks[MAX_CHUNKS];
static _Atomic uint32_t nnodes; /* node ids handed out in all (the walk's bound) */
/* The free list: (tag << 32 | id), id 0 for empty; every push and pop bumps
 * the tag, so a pop never succeeds on a head that left and came back (ABA).
 * No lock anywhere: a node is taken under an engine's mutex (the callback
 * gate's begin) and given back by an exiting thread, also in a child after
 * fork(), and a lock here would be one more for fork handlers to order. */
static _Atomic uint64_t free_head;
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static atomic_int check_off; /* tmo_testing_deadlock_check(0) */

/* This thread's node (NULL until its first callback): one thread-local
 * word, its id inside it (each access to a thread-local costs a call in a
 * position-independent build). */
_Thread_local struct tmo__wf_node *tmo__wf_self;
_Thread_local bool tmo__wait_published; /* this thread's edge is up */

static struct tmo__wf_node *node_at(uint32_t id) /* id = index + 1 */
{
	uint32_t i = id - 1;
	struct tmo__wf_node *c = atomic_load_explicit(&chunks[i / CHUNK_NODES], memory_order_acquire);
	return c == NULL ? NULL : &c[i % CHUNK_NODES];
}

static tmo__cbref ref_of(uint32_t id, uint64_t gen)
{
	return (uint64_t)id << GEN_BITS | (gen & GEN_MASK);
}

static void node_push(struct tmo__wf_node *n)
{
	uint64_t h = atomic_load_explicit(&free_head, memory_order_relaxed);
	uint64_t to;
	do {
		atomic_store_explicit(&n->next_free, (uint32_t)h, memory_order_relaxed);
		to = ((h >> 32) + 1) << 32 | n->id;
	} while (!atomic_compare_exchange_weak_explicit(&free_head, &h, to, memory_order_release,
	                                                memory_order_relaxed));
}

/* A node off the free list, or NULL when it is empty.  Nodes are never
 * freed, so reading a popped node's link is always safe. */
static struct tmo__wf_node *node_pop(void)
{
	uint64_t h = atomic_load_explicit(&free_head, memory_order_acquire);
	while ((uint32_t)h != 0) {
		struct tmo__wf_node *n = node_at((uint32_t)h);
		if (n == NULL)
			return NULL; /* never: a pushed id's chunk is in */
		uint64_t to = ((h >> 32) + 1) << 32 |
		              atomic_load_explicit(&n->next_free, memory_order_relaxed);
		if (atomic_compare_exchange_weak_explicit(&free_head, &h, to, memory_order_acquire,
		                                          memory_order_acquire))
			return n;
	}
	return NULL;
}

/* A node never used: the next id, its chunk allocated by whoever gets
 * there first.  NULL when out of ids or memory. */
static struct tmo__wf_node *node_new(void)
{
	uint32_t id = atomic_fetch_add_explicit(&nnodes, 1, memory_order_relaxed) + 1;
	uint32_t c = (id - 1) / CHUNK_NODES;
	if (c >= MAX_CHUNKS)
		return NULL;
	if (atomic_load_explicit(&chunks[c], memory_order_acquire) == NULL) {
		struct tmo__wf_node *mem = calloc(CHUNK_NODES, sizeof *mem);
		if (mem == NULL)
			return NULL; /* that id is never used */
		for (uint32_t i = 0; i < CHUNK_NODES; i++)
			mem[i].id = c * CHUNK_NODES + i + 1;
		struct tmo__wf_node *none = NULL;
		if (!atomic_compare_exchange_strong_explicit(&chunks[c], &none, mem,
		                                             memory_order_acq_rel,
		                                             memory_order_acquire))
			free(mem); /* another thread's chunk is in */
	}
	return node_at(id);
}

/* A thread that ran callbacks exits: its node goes back, outside any
 * callback (a callback that ended its thread leaves gen odd: made even). */
static void node_release(void *arg)
{
	struct tmo__wf_node *n = arg;
	uint64_t g = atomic_load_explicit(&n->gen, memory_order_relaxed);
	if (g & 1)
		atomic_store_explicit(&n->gen, g + 1, memory_order_release);
	atomic_store(&n->edge, 0);
	tmo__wf_self = NULL;
	node_push(n);
}

static void key_init(void) { (void)pthread_key_create(&exit_key, node_release); }

/* This thread's first callback: take a node.  NULL when out of ids or
 * memory: this thread's callbacks are then waited for unchecked (as before
 * the check existed), and nothing else changes. */
static __attribute__((noinline)) struct tmo__wf_node *node_take(void)
{
	pthread_once(&key_once, key_init);
	struct tmo__wf_node *n = node_pop();
	if (n == NULL && (n = node_new()) == NULL)
		return NULL;
	if (pthread_setspecific(exit_key, n) != 0) {
		node_push(n); /* never released at exit: give it back */
		return NULL;
	}
	return tmo__wf_self = n;
}

tmo__cbref tmo__cb_begin_first(void)
{
	return node_take() == NULL ? 0 : tmo__cb_begin();
}

/* Step 2: whether the chain from `ref` comes back to `me` (this thread's
 * running invocation). */
static bool chain_reaches(tmo__cbref ref, tmo__cbref me)
{
	uint32_t bound = atomic_load_explicit(&nnodes, memory_order_relaxed) + 1;
	for (uint32_t hop = 0; hop < bound; hop++) {
		if (ref == me)
			return true;
		struct tmo__wf_node *x = node_at((uint32_t)(ref >> GEN_BITS));
		if (x == NULL)
			return false;
		uint64_t want = ref & GEN_MASK;
		if ((atomic_load(&x->gen) & GEN_MASK) != want)
			return false; /* that invocation returned: its waiters go on */
		tmo__cbref next = atomic_load(&x->edge);
		if ((atomic_load(&x->gen) & GEN_MASK) != want || next == 0)
			return false;
		ref = next;
	}
	return false; /* a cycle without us (waits that never check) */
}

int tmo__wait_begin(tmo__cbref ref)
{
	struct tmo__wf_node *n = tmo__wf_self;
	if (n == NULL || ref == 0 || atomic_load_explicit(&check_off, memory_order_relaxed))
		return 0; /* not inside a callback: nobody can be waiting for us */
	uint64_t g = atomic_load_explicit(&n->gen, memory_order_relaxed);
	if (!(g & 1))
		return 0;
	if (tmo__wait_published && atomic_load_explicit(&n->edge, memory_order_relaxed) == ref)
		return 0; /* checked, and published ever since: nothing to look at again */
	atomic_store(&n->edge, ref); /* step 1: seq_cst, before the walk's loads */
	tmo__wait_published = true;
	if (!chain_reaches(ref, ref_of(n->id, g)))
		return 0;
	tmo__wait_end();
	return TMO_EDEADLK;
}

void tmo__wait_withdraw(void)
{
	tmo__wait_published = false;
	atomic_store_explicit(&tmo__wf_self->edge, 0, memory_order_release);
}

void tmo_testing_deadlock_check(int on) { atomic_store(&check_off, on == 0); }
