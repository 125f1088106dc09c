/* Allocation and thread-creation hooks (include/tmo/testing.h). */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/internal.h"
#include "ds/heap.h"

/* The hook is read on every allocation; it is set only while no engine call
 * is in flight, but read atomically so a sanitizer sees no race with engine
 * threads started earlier. */
static _Atomic(tmo_fault_fn *) fault_fn;
static _Atomic(void *) fault_ctx;
static atomic_llong live_allocs;

static _Atomic uint64_t node_cap;
static atomic_int timely;
void tmo_testing_timely_timer(int on) { atomic_store(&timely, on != 0); }
int tmo__timely_timer(void) { return atomic_load_explicit(&timely, memory_order_relaxed); }
void tmo_testing_set_node_cap(uint64_t nodes) { atomic_store(&node_cap, nodes); }
uint64_t tmo__node_cap(void) { return atomic_load(&node_cap); }

void tmo_testing_set_fault(tmo_fault_fn *fn, void *ctx)
{
	atomic_store(&fault_ctx, ctx);
	atomic_store(&fault_fn, fn);
}

int64_t tmo_testing_live_allocs(void) { return atomic_load(&live_allocs); }

int tmo__fault(enum tmo_fault_kind kind)
{
	tmo_fault_fn *fn = atomic_load_explicit(&fault_fn, memory_order_acquire);
	return fn != NULL && fn(kind, atomic_load(&fault_ctx));
}

static void *counted(void *p)
{
	if (p != NULL) {
		atomic_fetch_add_explicit(&live_allocs, 1, memory_order_relaxed);
	}
	return p;
}

void *tmo__malloc(size_t n)
{
	if (tmo__fault(TMO_FAULT_ALLOC))
		return NULL;
	return counted(malloc(n));
}

void *tmo__calloc(size_t nmemb, size_t size)
{
	if (tmo__fault(TMO_FAULT_ALLOC))
		return NULL;
	return counted(calloc(nmemb, size));
}

void *tmo__aligned_alloc(size_t align, size_t n)
{
	void *p = NULL;
	if (tmo__fault(TMO_FAULT_ALLOC))
		return NULL;
	if (posix_memalign(&p, align, n) != 0)
		return NULL;
	return counted(p);
}

void *tmo__realloc(void *p, size_t n)
{
	if (p == NULL)
		return tmo__malloc(n);
	if (tmo__fault(TMO_FAULT_ALLOC))
		return NULL; /* as a failed realloc: p is kept */
	return realloc(p, n); /* still one block: the count stays */
}

void tmo__free(void *p)
{
	if (p != NULL) {
		atomic_fetch_sub_explicit(&live_allocs, 1, memory_order_relaxed);
		free(p);
	}
}

static const struct tmo_heap_mem heap_mem = {tmo__malloc, tmo__free, tmo__realloc};

int tmo__heap_init(struct tmo_heap *h, unsigned arity, uint32_t initial_cap)
{
	return tmo__heap_init_with(h, arity, initial_cap, &heap_mem);
}

/* Every engine thread runs callbacks: its stack must leave them at least
 * TMO_CALLBACK_STACK_MIN bytes.  glibc carves static TLS and the thread
 * descriptor out of the requested size, and the engine's own frames sit
 * above the callback's, so the floor asks for a reserve on top. */
#define THREAD_STACK_RESERVE (64 * 1024)
#define THREAD_STACK_FLOOR ((size_t)TMO_CALLBACK_STACK_MIN + THREAD_STACK_RESERVE)

/* The stack size a thread created with attr (NULL: the process defaults,
 * which follow RLIMIT_STACK at startup and pthread_setattr_default_np)
 * would get, or 0 if unknown. */
static size_t stack_size_of(const pthread_attr_t *attr)
{
	size_t sz = 0;
	if (attr != NULL)
		return pthread_attr_getstacksize(attr, &sz) == 0 ? sz : 0;
	pthread_attr_t def;
	if (pthread_getattr_default_np(&def) != 0)
		return 0;
	if (pthread_attr_getstacksize(&def, &sz) != 0)
		sz = 0;
	pthread_attr_destroy(&def);
	return sz;
}

/* *out := attr (NULL: defaults) with the stack raised to the floor.  The
 * attributes engines use carry over: detach state, guard size, scheduling
 * and the signal mask.  (A caller-supplied stack address or CPU affinity
 * would not; no engine sets either.) */
static int raised_copy(const pthread_attr_t *attr, pthread_attr_t *out)
{
	if (pthread_attr_init(out) != 0)
		return -1;
	int ok = pthread_attr_setstacksize(out, THREAD_STACK_FLOOR) == 0;
	if (ok && attr != NULL) {
		int v;
		size_t g;
		struct sched_param sp;
		sigset_t mask;
		ok = pthread_attr_getdetachstate(attr, &v) == 0 &&
		     pthread_attr_setdetachstate(out, v) == 0 &&
		     pthread_attr_getguardsize(attr, &g) == 0 && pthread_attr_setguardsize(out, g) == 0 &&
		     pthread_attr_getinheritsched(attr, &v) == 0 &&
		     pthread_attr_setinheritsched(out, v) == 0 &&
		     pthread_attr_getschedpolicy(attr, &v) == 0 &&
		     pthread_attr_setschedpolicy(out, v) == 0 &&
		     pthread_attr_getschedparam(attr, &sp) == 0 &&
		     pthread_attr_setschedparam(out, &sp) == 0 && pthread_attr_getscope(attr, &v) == 0 &&
		     pthread_attr_setscope(out, v) == 0;
		if (ok) {
			v = pthread_attr_getsigmask_np(attr, &mask);
			ok = v == PTHREAD_ATTR_NO_SIGMASK_NP ||
			     (v == 0 && pthread_attr_setsigmask_np(out, &mask) == 0);
		}
	}
	if (!ok) {
		pthread_attr_destroy(out);
		return -1;
	}
	return 0;
}

int tmo__thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                       void *arg)
{
	if (tmo__fault(TMO_FAULT_THREAD))
		return TMO_EAGAIN;
	pthread_attr_t raised;
	const pthread_attr_t *use = attr;
	if (stack_size_of(attr) < THREAD_STACK_FLOOR) {
		if (raised_copy(attr, &raised) != 0)
			return TMO_ESYS;
		use = &raised;
	}
	int rc = pthread_create(th, use, fn, arg);
	if (use == &raised)
		pthread_attr_destroy(&raised);
	if (rc == 0)
		return 0;
	return rc == EAGAIN ? TMO_EAGAIN : TMO_ESYS;
}

int tmo__cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	if (pthread_condattr_init(&a) != 0)
		return TMO_ESYS;
	int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc == 0 ? 0 : TMO_ESYS;
}
