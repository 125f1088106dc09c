/*
 * The callback gate: the protocol by which a cancel waits for a callback
 * that is running on the engine's thread, shared by the engines whose one
 * thread runs callbacks one at a time (condvar, libevent).
 *
 * Rule
 * ----
 * Every call is made under the engine's mutex `m` (the one that guards the
 * timers' states), which the gate's waits release and re-take.
 *  - The engine thread brackets each callback with tmo__gate_begin(t)
 *    (before it drops `m` to call) and tmo__gate_end() (after it re-took
 *    `m`).  Between them, `running` names the timer: compared, never
 *    dereferenced (the callback may free it).
 *  - A cancel calls tmo__gate_wait() first.  When `running` is its timer
 *    and the caller is not the engine's own thread, it waits until that
 *    invocation has returned; otherwise it returns at once (from inside the
 *    callback: TMO_CANCEL_SELF, cancel never waits for itself).
 *  - tmo__gate_end() does not return (and the engine thread fires nothing
 *    more) until every waiting cancel has re-taken `m` and looked, so a
 *    waiter always sees the state the callback left: a re-arm made by the
 *    callback is the one it cancels, and a re-arming callback cannot
 *    starve its canceller.
 *  - The gate brackets each callback for the cross-engine deadlock check
 *    (core/internal.h: tmo__cb_begin in begin, tmo__cb_end in end, under m,
 *    so the invocation a waiter reads under m is exactly the running one)
 *    and a waiter checks before it waits: a wait that would deadlock is
 *    refused (TMO_EDEADLK) before the cancel has changed anything.
 *  - Destroy waits for a running callback by joining the engine thread.
 */
#ifndef TMO_CORE_GATE_H
#define TMO_CORE_GATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/internal.h" /* tmo__thread_engine */
#include "tmo/tmo.h"

struct tmo__gate {
	struct tmo_timer *running; /* whose callback runs now, or NULL */
	tmo__cbref ref;            /* and which invocation (core/internal.h) */
	uint64_t gen;              /* callbacks returned so far */
	uint32_t waiters;          /* cancels waiting for the running one */
	pthread_cond_t done_cv;    /* a callback returned */
	pthread_cond_t drain_cv;   /* the last waiter re-took the mutex */
};

/* 0 or TMO_ESYS. */
int tmo__gate_init(struct tmo__gate *g);
void tmo__gate_fini(struct tmo__gate *g);

/* Engine thread, under m, just before it releases m to call t's callback. */
static inline void tmo__gate_begin(struct tmo__gate *g, struct tmo_timer *t)
{
	g->running = t;
	g->ref = tmo__cb_begin();
}

/* Engine thread, under m, once the callback returned: wake the waiters and
 * wait until each has looked. */
void tmo__gate_end(struct tmo__gate *g, pthread_mutex_t *m);

/* Cancel, under m: wait for t's running callback unless this thread is the
 * engine's own (`e`).  Returns 1 when it waited, 0 when there was nothing to
 * wait for, TMO_EDEADLK when the wait would deadlock (core/internal.h): it
 * did not wait and the caller changes nothing (the cancel returns that). */
int tmo__gate_wait_running(struct tmo__gate *g, pthread_mutex_t *m);
static inline int tmo__gate_wait(struct tmo__gate *g, pthread_mutex_t *m, const struct tmo *e,
                                 const struct tmo_timer *t)
{
	if (g->running != t || tmo__thread_engine == e)
		return 0;
	return tmo__gate_wait_running(g, m);
}

/* Cancel, under m, when t's arm is not pending: what it reports.  `fired`:
 * the timer's last arm reached its callback. */
static inline int tmo__gate_result(const struct tmo__gate *g, const struct tmo_timer *t,
                                   bool fired, bool waited)
{
	if (waited)
		return TMO_CANCEL_WAITED;
	if (!fired) /* never armed, prevented by another cancel, or a re-arm
	             * the callback cancelled itself */
		return TMO_ENOTARMED;
	return g->running == t ? TMO_CANCEL_SELF : TMO_CANCEL_FIRED;
}

#endif /* TMO_CORE_GATE_H */
