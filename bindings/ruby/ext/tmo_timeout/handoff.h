/*
 * The handoff between a tmo engine's callback and the Ruby watcher thread.
 *
 * A timer's callback runs on a thread the engine owns, which Ruby does not
 * know: it may not call any Ruby API.  So each Timeout.timeout call holds a
 * request (struct req) whose timer's callback only marks the request FIRED,
 * pushes it on a lock-free stack and wakes the watcher; the watcher (one
 * Ruby thread, waiting without the GVL) raises in the target thread.
 *
 * A request's life (state, written with atomics; every other field is read
 * and written only under the GVL, by the caller or the watcher):
 *
 *   ARMED -> FIRED        the engine callback (the deadline passed)
 *   FIRED -> WITHDRAWN    the caller, after the block ended and cancel said
 *                         the callback ran: the watcher will skip it
 *   FIRED -> COMMITTED    the watcher, just before Thread#raise
 *   COMMITTED -> RAISED   the watcher, after Thread#raise returned (or
 *                         failed, or the watcher was killed inside it)
 *
 * Exactly one of WITHDRAWN and COMMITTED wins the compare-and-swap from
 * FIRED: the caller that loses it knows an interrupt is, or soon will be,
 * pending on its thread, and takes it back before its call returns.
 *
 * References: a request starts with 2 (the caller's, the watcher's).  A
 * cancel that prevented the callback drops both; otherwise the caller drops
 * one when it is done and the watcher one when it has handled the request.
 * At 0 the request returns to the pool.  Requests are pooled (allocated in
 * chunks, never freed) and their Ruby objects are marked for the GC while
 * any reference is held, so a request outlives the C frame that armed it
 * (a fiber abandoned inside a block).
 */
#ifndef TMO_RUBY_HANDOFF_H
#define TMO_RUBY_HANDOFF_H

#include <ruby.h>
#include <stdint.h>
#include <tmo/tmo.h>

enum req_state {
	REQ_IDLE = 0,
	REQ_ARMED,
	REQ_FIRED,
	REQ_WITHDRAWN,
	REQ_COMMITTED,
	REQ_RAISED,
};

struct req {
	struct tmo_timer timer;
	struct tmo *engine; /* the engine the timer was armed on */
	struct req *next;   /* the fired stack, the watcher's list, or the pool */
	int state;          /* enum req_state, atomic */
	int refs;           /* GVL */
	VALUE thread;       /* the caller's thread */
	VALUE klass;        /* Timeout.timeout's klass, or nil */
	VALUE message;      /* the message (never nil) */
	VALUE exc;          /* the exception the watcher raised (COMMITTED on) */
};

/* Counters, for the tests' evidence and Tmo.stats.  `fired` is written by
 * engine threads (atomic); the rest under the GVL.  arm_retries: arms the
 * engine refused for now (TMO_EAGAIN) and the call asked again. */
struct handoff_stats {
	uint64_t armed, fired, withdrawn, delivered, consumed, timed_out, watchers, arm_retries;
};
extern struct handoff_stats handoff_stats;

/* The pool (GVL).  req_get never returns NULL (NoMemoryError instead). */
struct req *req_get(void);
void req_put(struct req *r, int refs);
/* Mark the Ruby objects of every request that holds a reference. */
void req_mark_all(void);

/* The engine callback: arg is the struct req. */
void handoff_expired(struct tmo_timer *t, void *arg);
/* The watcher's next fired request, oldest first, or NULL (GVL). */
struct req *handoff_next(void);
/* Give r back to the watcher's list, first (a watcher killed before it
 * delivered r: the next watcher does). */
void handoff_unget(struct req *r);
/* Non-zero while a fired request waits for the watcher. */
int handoff_pending(void);
/* Wait for a fired request or handoff_wake (called without the GVL), and
 * the unblocking function Ruby calls to interrupt that wait. */
void *handoff_wait(void *unused);
void handoff_wake(void *unused);
/* Arm the wait: call (with the GVL) before each handoff_wait. */
void handoff_wait_prepare(void);
/* In a child after fork(): the parent's fired requests and wake-ups are
 * forgotten (their references leak; the threads that held them are gone). */
void handoff_reset(void);

#endif
