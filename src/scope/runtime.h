/*
 * What the scope runtime's three files share (not installed):
 *   frame.c  the per-thread context, frames and exceptions (raise, rescue,
 *            ensure, masking, delivery of an interrupt);
 *   scope.c  scopes: tmo_scope_run, the engine callback, ids and stats;
 *   wait.c   the waits (sleep, condition, queue): the interruption points
 *            that block.
 *
 * Implementation notes
 * --------------------
 * Per thread, one context (thread-local, initialised on first use): the chain
 * of handler frames (innermost first), the chain of running scopes, the mask
 * depth, the exception in flight, and the wake-up state that engine callbacks
 * and signallers touch: a mutex, a condvar on CLOCK_MONOTONIC, a `token` (a
 * signaller's wake-up) and `pending` (some scope expired and was not
 * delivered yet; a hint read without the lock by tmo_check()).
 *
 * Every blocking wait of the runtime parks on the waiting thread's OWN
 * condvar.  So an engine callback only ever locks the context of the thread
 * it targets, never a user's mutex: no lock-order cycle exists between a
 * callback and a waiter, and the context outlives every callback that can
 * reach it (the scope cancels its timer, waiting for a running callback,
 * before it returns).  Lock order: a user's (or queue's) mutex, then a
 * context's mutex; nothing takes them the other way round.
 *
 * Identity: scope ids come from one process-wide counter, taken by each
 * thread in blocks (one atomic add per block, not per scope), so an id is
 * never reused, in any thread, however the stack is.
 *
 * Which scope expired: its callback sets `fired`, but delivery does not trust
 * the order in which callbacks ran.  Engines with concurrent callbacks (the
 * thread engine) run an outer and an inner scope's callbacks together when
 * their deadlines are close or equal, and the inner one may store first.
 * Delivery therefore treats every scope whose deadline has passed by the
 * clock as expired too, and takes the outermost of them: an inner scope's
 * callback can only have run after its own deadline, so an outer scope with
 * an earlier (or equal) deadline is then expired as well.
 *
 * setjmp/longjmp: each function that calls setjmp keeps its state in a record
 * owned by its caller and only reads its (unchanged) parameters after a
 * longjmp, so no automatic variable of a setjmp-calling function is modified
 * between setjmp and longjmp (C11 7.13.2.1p3).  Raising copies the exception
 * into the context, pops the innermost frame, restores the mask depth the
 * frame was entered with, and jumps; every frame decides and passes on.
 */
#ifndef TMO_SCOPE_RUNTIME_H
#define TMO_SCOPE_RUNTIME_H

#include <setjmp.h>
#include <stdatomic.h>

#include "core/internal.h"
#include "tmo/scope.h"

struct frame {
	jmp_buf jb;
	struct frame *prev;
	int mask; /* mask depth at entry, restored when unwinding to here */
};

struct ctx {
	/* Thread-private (only the owning thread reads or writes these). */
	int inited;
	int mask;
	struct frame *top;
	struct tmo_scope *scope; /* innermost running scope */
	struct tmo_exc exc;      /* the exception being unwound */
	struct tmo_scope_stats stats;
	uint64_t next_id, id_end; /* this thread's block of scope ids */

	/* Shared with callbacks and signallers. */
	atomic_int pending; /* written under m; read without it as a hint */
	int token;          /* under m: a signaller woke this thread */
	pthread_mutex_t m;
	pthread_cond_t cv; /* only the owning thread waits on it */
};

struct tmo_scope {
	struct frame f;
	struct tmo_scope *parent;
	struct ctx *ctx;
	struct tmo *engine;
	uint64_t id;
	int64_t deadline; /* CLOCK_MONOTONIC ns; INT64_MAX: none */
	enum tmo_scope_mode mode;
	int armed;
	int delivered;    /* owner thread only */
	atomic_int fired; /* set by the engine callback */
	struct tmo_timer timer;
	tmo_block_fn *block;
	void *arg;
	intptr_t value;
};

/* This thread's context; usable as is for the thread-private fields and
 * `pending`, set up (mutex, condvar) only by tmo__ctx_get(). */
extern __attribute__((visibility("hidden"))) _Thread_local struct ctx tmo__tls;

/* Sets the context up on first use; NULL when its mutex or condvar could
 * not be made. */
struct ctx *tmo__ctx_setup(void);
static inline struct ctx *tmo__ctx_get(void)
{
	return tmo__tls.inited ? &tmo__tls : tmo__ctx_setup();
}

/* A program error of the runtime's user: print and abort. */
_Noreturn void tmo__scope_fatal(const char *what);

/* Make f the innermost frame; unwinding to it restores the mask depth of now. */
static inline void tmo__frame_push(struct ctx *c, struct frame *f)
{
	f->prev = c->top;
	f->mask = c->mask;
	c->top = f;
}

/* An interrupt is pending and not masked. */
static inline int tmo__deliverable(struct ctx *c)
{
	return c->mask == 0 && atomic_load_explicit(&c->pending, memory_order_acquire);
}

/* Unwind to the innermost frame with *exc (copied into the context). */
_Noreturn void tmo__raise_exc(struct ctx *c, const struct tmo_exc *exc);

/* Raise the outermost expired scope's interrupt; returns when none is
 * expired (a hint raced), with `pending` recomputed. */
void tmo__deliver(struct ctx *c);

/* `pending` := some scope on the chain expired and was not delivered. */
void tmo__recompute_pending(struct ctx *c);

#endif /* TMO_SCOPE_RUNTIME_H */
