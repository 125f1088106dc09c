/*
 * The lock-free core's test hooks: points where a test holds a thread, so
 * that an interleaving the scheduler gives rarely (an owner preempted with
 * a node in transit, a timer thread preempted between its steal and its
 * collect) happens on every run (tests/hooked/).  They exist only where
 * TMO_LF_TEST_HOOKS is defined: tests/hooked/ compiles the core once with
 * it, for all of its tests; in libtmo every hook is nothing, no load and
 * no branch.
 */
#ifndef TMO_LF_HOOK_H
#define TMO_LF_HOOK_H

struct tmo;

#ifdef TMO_LF_TEST_HOOKS
#include <stdatomic.h>

typedef void tmo__lf_hook_fn(struct tmo *e);
/* An owner holds a node in transit (timer.c, Order): its CAS out of the
 * ring won, its record's transit announced, the node not yet filed or
 * pushed.  Called on the owner's thread, the owner's base locked if it
 * files into it. */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_transit;
/* The timer thread's round, after its steal and drain, before it collects
 * what is due. */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_round;
/* The timer thread back from a sleep (timer.c, step 5), before its next
 * round publishes a tick. */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_woke;
/* An owner holds its own base's lock to take a cancelled arm out of it
 * (cancel.c): nothing in transit.  Called on the owner's thread. */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_owner_in;
/* A calibration pair (clock.c, tsc_pair) between its first TSC read and
 * its clock read; e is NULL (the pair is the process's). */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_pair;
/* The timer thread inside one of its windows between an allocation and
 * its publication (trim.c, its arrays allocated; fire.c, the due arrays
 * resized), holding the engine's mem_lock (lf.h). */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_mem;
/* The timer thread about to trim (trim.c, trim_pages: its arrays
 * allocated, before it reads which pages it may give back), holding the
 * engine's mem_lock. */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_trim_start;
/* The timer thread in a trim, holding the depot's nodes of the pages it
 * may give back (trim.c, trim_pages: taken and counted by page, the other
 * pages' nodes pushed back, these not yet). */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_trim;
/* A fork's prepare handler (rec.c, Fork) found an engine's mem_lock held
 * and is about to wait for it.  Called on the forking thread. */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_fork_wait;
/* A thread refills its node cache (depot.c, tmo__lf_cache_refill: from its
 * home, its spare or the depot, else by growing the pool, a page fault a
 * page).  Called on the refilling thread, before it looks. */
extern tmo__lf_hook_fn *_Atomic tmo__lf_hook_refill;
/* A step between the TSC and the clock, as a virtual machine's pause may
 * make (clock.c, Steps): added to every TSC read (cpu.h, lf_tsc) and to
 * every clock read (core/tmo.c, tmo_now_ns; the event count's sleeps take
 * it off again: ec.c), from when a test stores them: tmo__test_tsc_skew
 * and tmo__test_clock_skew, declared in cpu.h, defined in core/tmo.c. */

#define LF_HOOK(name, e)                                                              \
	do {                                                                              \
		tmo__lf_hook_fn *h_ = atomic_load_explicit(&tmo__lf_hook_##name,            \
		                                           memory_order_acquire);           \
		if (h_ != 0)                                                                  \
			h_(e);                                                                    \
	} while (0)
#else
#define LF_HOOK(name, e) ((void)0)
#endif

#endif
