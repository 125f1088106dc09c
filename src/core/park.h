/*
 * The park hook (a test hook: tmo_testing_park() in tmo/testing.h) shared
 * by the engines with one timer thread (condvar, libevent, posix, and the
 * lock-free core of mpsc and wheel).
 *
 * Rule: the engine thread calls tmo__park_point() at the points of its loop
 * where it may be held, holding there whatever it holds (the engine's own
 * choice, stated in its header).  The park op is tmo__park_set(): park(1)
 * records the request and, unless one was already recorded (the parked
 * thread may hold what a wake-up needs), wakes the engine thread its own way
 * (`wake`) so that it reaches a park point, then waits until it is parked;
 * park(0) and destroy release it (tmo__park_release), never needing a lock
 * the parked thread holds.  `req` is atomic so the engine thread's
 * test is one load; it is written under `mu`, so a park(0) and a park(1)
 * never cross.
 *
 * The thread may reach a park point, and hold there, as soon as the request
 * is recorded: before `wake` has run.  So `wake` must not need what the
 * parked thread holds, unless the engine names that lock (`wake_lock`):
 * park(1) then records the request and calls `wake` while holding it, and
 * the thread, which parks only holding it, cannot park in between.
 * (condvar's first park took its mutex in `wake`, after the request: a
 * thread that parked in that gap held the mutex, and park(1) waited for it
 * for ever; tests/engine/lifecycle.c, case park_rounds.)  park(1)s run one
 * at a time (`set_mu`), so no other request lands while one waits for
 * `wake_lock`.
 */
#ifndef TMO_CORE_PARK_H
#define TMO_CORE_PARK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct tmo;

struct tmo__park {
	pthread_mutex_t mu;
	pthread_mutex_t set_mu; /* one park(1) at a time; taken before wake_lock */
	pthread_cond_t cv;      /* CLOCK_MONOTONIC: engines may time waits on it */
	atomic_int req;
	bool parked; /* under mu */
};

/* 0 or TMO_ESYS. */
int tmo__park_init(struct tmo__park *p);
void tmo__park_fini(struct tmo__park *p);

/* Engine thread: hold here while a park is requested. */
void tmo__park_point(struct tmo__park *p);

/* The park op of engine e: on != 0 parks, on == 0 releases; returns 0.
 * With `hold_off` set, park(1) first waits under mu (on cv) while
 * *hold_off is non-zero.  With `wake_lock` set (the lock the thread holds
 * at its park points), the request is recorded and `wake` called under
 * it. */
int tmo__park_set(struct tmo__park *p, int on, const atomic_int *hold_off,
                  pthread_mutex_t *wake_lock, void (*wake)(struct tmo *e), struct tmo *e);
/* park(0) and destroy: release the engine thread. */
void tmo__park_release(struct tmo__park *p);

static inline bool tmo__park_requested(struct tmo__park *p)
{
	return atomic_load_explicit(&p->req, memory_order_acquire) != 0;
}

#endif /* TMO_CORE_PARK_H */
