/*
 * Internal helpers shared by the library's own code (tmo__ prefix).
 * Not installed.
 */
#ifndef TMO_INTERNAL_H
#define TMO_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tmo/testing.h"
#include "tmo/tmo.h"

/* Allocation and thread creation go through the fault hook
 * (include/tmo/testing.h).  Use these, never malloc/pthread_create directly,
 * so fault injection reaches every path. */
void *tmo__malloc(size_t n);
void *tmo__calloc(size_t nmemb, size_t size);
void *tmo__aligned_alloc(size_t align, size_t n); /* free with tmo__free */
void tmo__free(void *p);
/* realloc(3) under the same fault injection and count (p NULL: tmo__malloc). */
void *tmo__realloc(void *p, size_t n);
/* pthread_create through the hook; returns 0 or TMO_EAGAIN. */
int tmo__thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                       void *arg);
/* The library's heaps (src/ds/heap.h) on the counted allocator above: what
 * every engine calls; tmo__heap_init_with with tmo__malloc, tmo__free and
 * tmo__realloc. */
struct tmo_heap;
int tmo__heap_init(struct tmo_heap *h, unsigned arity, uint32_t initial_cap);
/* tmo_testing_timely_timer(): 1 when on */
int tmo__timely_timer(void);
/* tmo_testing_set_node_cap(): 0 or the cap. */
uint64_t tmo__node_cap(void);
/* Consult the hook for another kind of resource: non-zero means fail. */
int tmo__fault(enum tmo_fault_kind kind);

/* Engine-private view of a timer: an engine defines its own struct, no
 * larger than the opaque words, asserts that it fits at file scope with
 * TMO__PRIV_FITS(type), and gets at it with TMO__PRIV(type, timer). */
#define TMO__PRIV_FITS(type)                                                          \
	_Static_assert(sizeof(type) <= sizeof(((struct tmo_timer *)0)->tmo_private) &&   \
	                   _Alignof(type) <= _Alignof(uint64_t),                          \
	               #type " does not fit in struct tmo_timer's private words")
#define TMO__PRIV(type, timer) ((type *)(void *)(timer)->tmo_private)

/* Defined in ASan and TSan builds (gcc spells it __SANITIZE_*, clang
 * __has_feature): their runtimes need far more memory per thread, so thread
 * limits and the tests that reach them scale down. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TMO__UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TMO__UNDER_SANITIZER 1
#endif
#endif
/* ThreadSanitizer alone (it does not model membarrier). */
#if defined(__SANITIZE_THREAD__)
#define TMO__UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TMO__UNDER_TSAN 1
#endif
#endif

/* Absolute CLOCK_MONOTONIC ns <-> struct timespec. */
#include <time.h>
static inline struct timespec tmo__ts_from_ns(int64_t ns)
{
	struct timespec ts;
	ts.tv_sec = (time_t)(ns / TMO_NSEC_PER_SEC);
	ts.tv_nsec = (long)(ns % TMO_NSEC_PER_SEC);
	return ts;
}

/* The engine whose thread this is (NULL on the application's threads).
 * Every engine sets it at the start of each thread it owns (timer threads,
 * per-timer threads, the thread that runs its callbacks), so the core can
 * refuse, with TMO_EDEADLK, calls that would wait for the calling thread
 * itself: tmo_destroy() and tmo_testing_park() from the engine's own callback, and a
 * scope on an engine whose callbacks are serialized on this thread. */
extern _Thread_local struct tmo *tmo__thread_engine;

/* The first call of every thread an engine starts: marks it as e's
 * (tmo__thread_engine) and names it "tmo-<engine>" (as ps -L, top -H and
 * gdb show it; the tests find leftover engine threads by that name). */
void tmo__thread_enter(struct tmo *e, const char *engine);

/* ---- waits for callbacks across engines (src/core/waitfor.c) ---------------
 * A cancel that would wait for a callback whose thread is itself waiting,
 * directly or through a chain of engines, for the callback that runs on the
 * cancelling thread, is refused with TMO_EDEADLK instead (tmo.h).  Every
 * engine whose cancel can wait for a running callback takes part, in three
 * places; an engine built on the callback gate (core/gate.h) gets all three
 * from the gate and has nothing to add.
 *
 *  1. The thread that runs a callback brackets it:
 *         ref = tmo__cb_begin();   ... cb(t, arg); ...   tmo__cb_end();
 *     and stores `ref` where a cancel that finds this callback running
 *     reads it (under the engine's lock, or before the store that shows the
 *     callback as running, with release).  cb_begin comes before the
 *     callback is visible as running, cb_end after it returned, on the
 *     same thread.
 *  2. A cancel on another thread, having found that callback running and
 *     read its `ref`, and before it changes anything (nothing prevented,
 *     nothing held):
 *         if (tmo__wait_begin(ref) != 0) return TMO_EDEADLK;  (unlock first)
 *     then waits as it always did.  One ref per wait: before each further
 *     wait (another invocation), call it again with that one's ref.
 *  3. When the waiting is over (every return path after a 0 from
 *     tmo__wait_begin): tmo__wait_end();
 * A ref read when the callback may already have returned is harmless (its
 * generation no longer matches, it closes no cycle); one read before
 * cb_begin's store is a missed refusal: hence the order in 1.  All three
 * are a few instructions, lock-free, and never allocate but on a thread's
 * first callback. */
typedef uint64_t tmo__cbref; /* an invocation of a callback; 0: unknown */
/* Inline, as they run around every callback: a thread-local read, a load
 * and a release store each (the node: src/core/waitfor.c). */
struct tmo__wf_node {
	_Atomic uint64_t gen;  /* odd inside a callback; written by its thread */
	_Atomic uint64_t edge; /* the tmo__cbref it waits for, 0 for none */
	_Atomic uint32_t next_free; /* the free list's link (id, 0: the end) */
	uint32_t id;                /* its index + 1 */
};
#define TMO__WF_GEN_BITS 40
extern _Thread_local struct tmo__wf_node *tmo__wf_self;
tmo__cbref tmo__cb_begin_first(void); /* a thread's first: takes its node */
static inline tmo__cbref tmo__cb_begin(void)
{
	struct tmo__wf_node *n = tmo__wf_self;
	if (__builtin_expect(n == NULL, 0))
		return tmo__cb_begin_first();
	uint64_t g = atomic_load_explicit(&n->gen, memory_order_relaxed) + 1;
	atomic_store_explicit(&n->gen, g, memory_order_release);
	return (uint64_t)n->id << TMO__WF_GEN_BITS | (g & ((UINT64_C(1) << TMO__WF_GEN_BITS) - 1));
}
static inline void tmo__cb_end(void)
{
	struct tmo__wf_node *n = tmo__wf_self;
	if (n != NULL)
		atomic_store_explicit(&n->gen, atomic_load_explicit(&n->gen, memory_order_relaxed) + 1,
		                      memory_order_release);
}
int tmo__wait_begin(tmo__cbref ref); /* 0: wait; TMO_EDEADLK: do not */
/* tmo__wait_end is inline: one thread-local test when nothing was published
 * (a cancel from outside any callback, or one that did not wait). */
extern _Thread_local bool tmo__wait_published;
void tmo__wait_withdraw(void);
static inline void tmo__wait_end(void)
{
	if (__builtin_expect(tmo__wait_published, 0))
		tmo__wait_withdraw();
}

/* 1 in a child after fork() for every engine inherited from the parent. */
static inline int tmo__forked(const struct tmo *e)
{
	return __atomic_load_n(&((const struct tmo_base *)(const void *)e)->id, __ATOMIC_RELAXED) ==
	       TMO__FORKED_ID;
}

/* After a callback returns on an engine's thread: when the callback forked
 * and this is the child's copy of the thread (the child's only thread), it
 * ends here, touching nothing of the engine (a parent thread may have held
 * any of its locks at the fork); the child exits 0 as when its last thread
 * exits. */
static inline void tmo__end_if_forked(const struct tmo *e)
{
	if (__builtin_expect(tmo__forked(e), 0))
		pthread_exit(NULL);
}

/* An engine's vtable entries, for an engine whose ops are named
 * <prefix>_create, _destroy, _arm, _cancel, _stats and _destroy_forked. */
#define TMO__ENGINE_OPS(p)                                                               \
	.create = p##_create, .destroy = p##_destroy, .arm = p##_arm, .cancel = p##_cancel, \
	.stats = p##_stats, .destroy_forked = p##_destroy_forked

/* A condition variable on CLOCK_MONOTONIC. Returns 0 or TMO_ESYS. */
int tmo__cond_init_monotonic(pthread_cond_t *cv);

/* Whether thread tid of this process is blocked in the kernel (sleeping,
 * or in uninterruptible wait), as /proc/self/task/<tid>/stat says; false
 * when it cannot be read. */
bool tmo__task_blocked(pid_t tid);

#endif /* TMO_INTERNAL_H */
