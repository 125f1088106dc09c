/*
 * tmo/wait.h — the waits of the scope runtime: sleep, a condition variable
 * and a queue.
 *
 * They are the interruption points that block: a timeout scope's interrupt
 * (tmo/scope.h) reaches a thread only at an interruption point, and these
 * are the ones where a thread can wait.  A deliverable interrupt is raised on
 * entry, or instead of waiting on; outside any scope they are plain waits.
 * Each blocks by parking the waiting thread on its own condition variable,
 * so an engine callback or a signaller only ever locks the context of the
 * thread it wakes, never a user's mutex.
 *
 * Errors: 0 (or a non-negative result, enum tmo_wait_result) or a negative
 * enum tmo_error (tmo/tmo.h).
 */
#ifndef TMO_WAIT_H
#define TMO_WAIT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tmo/tmo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results ------------------------------------------------------------- */

/* Non-negative results of the waits. */
enum tmo_wait_result {
	TMO_WAIT_OK = 0,       /* signalled, or an item was taken */
	TMO_WAIT_TIMEDOUT = 1, /* the wait's own timeout elapsed */
};
/* Timeout argument of the waits meaning "no timeout".  Any other negative
 * timeout is TMO_EBADTIMEOUT. */
#define TMO_WAIT_FOREVER INT64_C(-1)

/* ---- sleep ------------------------------------------------------------- */

/* Sleep ns nanoseconds (0: just an interruption point).  Returns 0, or
 * TMO_EBADTIMEOUT if ns is negative or above TMO_TIMEOUT_MAX, or TMO_ESYS. */
int tmo_sleep(int64_t ns);

/* ---- the condition variable ------------------------------------------- */

/* A condition variable whose waits are interruption points.  It is used with
 * a pthread mutex, which must be held to wait, signal and broadcast (the
 * waiter list lives under it).  No allocation: each waiter records itself on
 * its own stack. */
struct tmo__waiter;
struct tmo_cond {
	struct tmo__waiter *head, *tail;
};
#define TMO_COND_INIT {0, 0}
void tmo_cond_init(struct tmo_cond *cv);

/* Wait until signalled, up to timeout_ns (TMO_WAIT_FOREVER: no limit).
 * m must be held; it is released while waiting and held again on return.
 * Returns TMO_WAIT_OK (signalled; wake-ups are never spurious),
 * TMO_WAIT_TIMEDOUT, or TMO_EBADTIMEOUT; raises a deliverable interrupt (on
 * entry, or instead of waiting on) with m held again, as pthread
 * cancellation does.  A waiter that was signalled returns TMO_WAIT_OK even if
 * an interrupt is pending too (it is delivered at the next point), so no
 * signal is ever lost to an interrupt. */
int tmo_cond_wait(struct tmo_cond *cv, pthread_mutex_t *m, int64_t timeout_ns);
/* Wake the longest-waiting waiter (signal) or all of them; m held.  Return
 * the number woken. */
int tmo_cond_signal(struct tmo_cond *cv);
int tmo_cond_broadcast(struct tmo_cond *cv);

/* ---- the queue ----------------------------------------------------------- */

/* An unbounded MPMC FIFO queue of intrusive nodes (embed struct tmo_qnode in
 * your message).  Push never blocks (beyond a short mutex) and allocates
 * nothing; pop is an interruption point.
 *
 * A node is on at most one queue at a time, and it knows which: initialise
 * it once (TMO_QNODE_INIT, tmo_qnode_init() or all-zero bytes); pop,
 * remove and destroy hand it back initialised.  Every function refuses a
 * NULL queue or node with TMO_EINVAL, and a push of a node that is already
 * queued (here or on another queue) with TMO_EARMED (the node is "armed":
 * queued), leaving both queues as they were. */
struct tmo_queue;
struct tmo_qnode {
	struct tmo_qnode *next;
	struct tmo_queue *queue; /* the queue it is on, NULL when on none */
};
#define TMO_QNODE_INIT {0, 0}
void tmo_qnode_init(struct tmo_qnode *node);
struct tmo_queue {
	pthread_mutex_t lock;
	struct tmo_cond nonempty;
	struct tmo_qnode *head, *tail;
	size_t len;
};
/* Returns 0, TMO_EINVAL (q NULL) or TMO_ESYS. */
int tmo_queue_init(struct tmo_queue *q);
/* The queue must have no waiter; remaining nodes go back to the caller,
 * initialised.  A NULL q is ignored. */
void tmo_queue_destroy(struct tmo_queue *q);
/* Append node.  Returns 0, TMO_EINVAL (q or node NULL) or TMO_EARMED (node
 * already queued). */
int tmo_queue_push(struct tmo_queue *q, struct tmo_qnode *node);
/* Take the oldest node into *out, waiting up to timeout_ns
 * (TMO_WAIT_FOREVER, or 0 for a try).  Returns TMO_WAIT_OK,
 * TMO_WAIT_TIMEDOUT (*out = NULL), TMO_EINVAL (q or out NULL) or
 * TMO_EBADTIMEOUT.  A pending interrupt is raised on entry; while waiting, a
 * pop that was signalled takes its node even if an interrupt is pending too
 * (the interrupt waits for the next point), a node present when the pop's own
 * timeout elapses is taken, and a pop is interrupted only when it consumed no
 * signal: no node is ever lost or stranded when a message and a timeout
 * race.  A node taken is never interrupted away: pop returns right after. */
int tmo_queue_pop(struct tmo_queue *q, int64_t timeout_ns, struct tmo_qnode **out);
/* The number of queued nodes, or TMO_EINVAL (q NULL). */
int64_t tmo_queue_len(struct tmo_queue *q);
/* Unlink node if it is on q (O(length): for rare clean-ups, such as a
 * timeout marker that an engine callback pushed just as the receive it
 * belonged to got its message).  Returns 1 if it was on q, 0 if not (on no
 * queue, or on another one, which is left alone), TMO_EINVAL (q or node
 * NULL).  Not an interruption point. */
int tmo_queue_remove(struct tmo_queue *q, struct tmo_qnode *node);

#ifdef __cplusplus
}
#endif
#endif /* TMO_WAIT_H */
