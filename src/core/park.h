/*
 * The park hook (a test hook: tmo_testing_park() in tmo/testing.h) shared
 * by the engines with one timer thread (condvar, libevent, posix).
 *
 * Rule: the engine thread calls tmo__park_point() at the points of its loop
 * where it may be held, holding there whatever it holds (the engine's own
 * choice, stated in its header).  A requester calls tmo__park_request(),
 * then, unless it was already requested, wakes the engine thread its own
 * way so that it reaches a park point, then tmo__park_wait() until it is
 * parked.  tmo__park_release() (park(0), destroy) lets it go; it never needs
 * a lock the parked thread holds.  `req` is atomic so the engine thread's
 * test is one load; it is written under `mu`, so a park(0) and a park(1)
 * never cross.
 */
#ifndef TMO_CORE_PARK_H
#define TMO_CORE_PARK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct tmo__park {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC: engines may time waits on it */
	atomic_int req;
	bool parked; /* under mu */
};

/* 0 or TMO_ESYS. */
int tmo__park_init(struct tmo__park *p);
void tmo__park_fini(struct tmo__park *p);

/* Engine thread: hold here while a park is requested. */
void tmo__park_point(struct tmo__park *p);

/* Requester: ask for a park; returns true when one was already requested
 * or the thread is still parked (no wake-up needed).  With `hold_off` set,
 * waits under mu (on cv) while *hold_off is non-zero first. */
bool tmo__park_request(struct tmo__park *p, const atomic_int *hold_off);
/* Requester: return once the engine thread is parked. */
void tmo__park_wait(struct tmo__park *p);
/* park(0) and destroy: release the engine thread. */
void tmo__park_release(struct tmo__park *p);

static inline bool tmo__park_requested(struct tmo__park *p)
{
	return atomic_load_explicit(&p->req, memory_order_acquire) != 0;
}

#endif /* TMO_CORE_PARK_H */
