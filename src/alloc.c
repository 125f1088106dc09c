/* Allocation and thread-creation hooks (include/tmo/testing.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"

/* The hook is read on every allocation; it is set only while no engine call
 * is in flight, but read atomically so a sanitizer sees no race with engine
 * threads started earlier. */
static _Atomic(tmo_fault_fn *) fault_fn;
static _Atomic(void *) fault_ctx;
static atomic_llong live_allocs;
static atomic_llong total_allocs;

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
int64_t tmo_testing_total_allocs(void) { return atomic_load(&total_allocs); }

int tmo__fault(enum tmo_fault_kind kind)
{
	tmo_fault_fn *fn = atomic_load_explicit(&fault_fn, memory_order_acquire);
	return fn != NULL && fn(kind, atomic_load(&fault_ctx));
}

static void *counted(void *p)
{
	if (p != NULL) {
		atomic_fetch_add_explicit(&live_allocs, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&total_allocs, 1, memory_order_relaxed);
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

void tmo__free(void *p)
{
	if (p != NULL) {
		atomic_fetch_sub_explicit(&live_allocs, 1, memory_order_relaxed);
		free(p);
	}
}

int tmo__thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                       void *arg)
{
	if (tmo__fault(TMO_FAULT_THREAD))
		return TMO_EAGAIN;
	int rc = pthread_create(th, attr, fn, arg);
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
