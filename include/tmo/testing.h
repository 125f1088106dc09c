/*
 * tmo testing hooks: fault injection and allocation accounting.
 *
 * Every allocation and every thread creation inside the library goes through
 * one hook, so tests can make the N-th one fail and check that the call
 * returns a named error, leaks nothing and loses no accepted timer.
 *
 * Synchronization: set the hook while no engine call is in flight.
 */
#ifndef TMO_TESTING_H
#define TMO_TESTING_H

#include <stdint.h>

#include "tmo/tmo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- engine test hooks ---------------------------------------------------- */

/* What an engine offers tests beyond its production ops, through
 * tmo_engine_ops.testing (NULL: nothing).  A slot may be NULL. */
struct tmo_testing_ops {
	/* Park (progress scenario, lifecycle tests): with on != 0, make the
	 * timer thread stop at a hook inside its loop, holding whatever it
	 * holds there, and return once parked; on == 0 releases it.  An
	 * engine has it exactly when it declares TMO_CAP_PARK. */
	int (*park)(struct tmo *self, int on);
	/* Run fn(arg) on the engine's loop thread and return once it returned
	 * (the engines whose library's timers belong to one loop thread:
	 * libev_loop, libuv_loop).  There arm and cancel call the library
	 * directly, so a benchmark loop run inside fn measures the library's
	 * own cost.  No timer of the engine fires while fn runs: fn must not
	 * wait for one.  An engine has it exactly when it declares
	 * TMO_CAP_RUN_ON_LOOP. */
	int (*run_on_loop)(struct tmo *self, void (*fn)(void *arg), void *arg);
};

/* The engine's park hook.  TMO_ENULLENGINE, TMO_EFORKED, TMO_EDEADLK from
 * a thread the engine owns (parking would stop this very thread),
 * TMO_EINVAL when the engine has no park hook (no single timer thread). */
int tmo_testing_park(struct tmo *e, int on);

/* The engine's run_on_loop hook (above).  TMO_ENULLENGINE, TMO_EFORKED,
 * TMO_EINVAL when the engine has none (fn NULL too); from the loop thread
 * itself fn runs at once. */
int tmo_testing_run_on_loop(struct tmo *e, void (*fn)(void *arg), void *arg);

/* ---- faults and allocation accounting ----------------------------------- */

enum tmo_fault_kind {
	TMO_FAULT_ALLOC = 1,  /* malloc/calloc/realloc/aligned alloc */
	TMO_FAULT_THREAD = 2, /* pthread_create */
	TMO_FAULT_SYSRES = 3, /* other kernel resources (timer_create, ...) */
};

/* Return non-zero to make this allocation / thread creation fail. */
typedef int tmo_fault_fn(enum tmo_fault_kind kind, void *ctx);

/* Install (or, with NULL, remove) the fault hook. */
void tmo_testing_set_fault(tmo_fault_fn *fn, void *ctx);

/* The lock-free engines (mpsc, wheel) created after this call hold at most
 * `nodes` timer nodes (rounded up to a page of 64 nodes); 0 restores the
 * default (2^24, a 1 GiB reservation).  Past its cap arm answers TMO_EAGAIN
 * and never waits. */
void tmo_testing_set_node_cap(uint64_t nodes);

/* With on != 0, the lock-free engines' timer threads keep ticking (never
 * sleep) while arms stop coming, their calibration counts as fresh
 * however old it is, and an engine created meanwhile takes calibration
 * pairs until one yields a rate (at most 50 ms), as the first one does
 * natively.  For instruction counts under valgrind
 * (scripts/instructions), which runs one thread at a time, so that the
 * timer thread sees no arms between its looks and would sleep, and its
 * calibration ages by valgrind's slowdown: arms would then take the paths
 * that wake it or read the clock, not the one a timer thread scheduled
 * natively gives.  Never for real use. */
void tmo_testing_timely_timer(int on);

/* With on == 0, a cancel no longer checks, before it waits for a running
 * callback, whether that wait would deadlock (tmo.h, TMO_EDEADLK): the
 * engines wait as they would without the check, and two callbacks that
 * cancel each other's timers hang.  For the test that shows the check is
 * what prevents the hang (tests/engine/deadlock.c).  Default on. */
void tmo_testing_deadlock_check(int on);

/* Library allocations currently live (allocated and not yet freed): a leak
 * check that works without a sanitizer. */
int64_t tmo_testing_live_allocs(void);

#ifdef __cplusplus
}
#endif
#endif /* TMO_TESTING_H */
