/*
 * tmo/scope.h — timeout scopes with Ruby's skip-rescue semantics, built on any
 * engine of tmo/tmo.h.
 *
 * Overview
 * --------
 * tmo_scope_run() runs a block (a function and its argument) on the calling
 * thread with a deadline on a chosen engine, as Ruby's
 * `Timeout.timeout(sec) { ... }` does.  When the deadline passes, the engine's
 * callback marks the scope as expired and wakes the thread; the interrupt is
 * delivered at the thread's next interruption point:
 *
 *   tmo_check()        an explicit check, for busy loops (no syscall, no
 *                      clock read, no lock: a call and a thread-local read);
 *   tmo_sleep()        a sleep;
 *   tmo_cond_wait()    a condition wait;
 *   tmo_queue_pop()    a queue pop, with an optional timeout of its own;
 *   tmo_unmask()       leaving the outermost masked region.
 *
 * Nothing else is interrupted: code that never reaches an interruption point
 * runs to its end (C has no safe asynchronous unwinding).
 *
 * The block's own code handles errors with rescue (catch, with a filter) and
 * ensure (cleanup) frames, nestable: tmo_rescue(), tmo_ensure(), tmo_raise().
 * How the timeout interrupt travels through those frames is chosen per scope
 * (enum tmo_scope_mode); it is the subject of Ruby Bug #8730:
 *
 *   mode        | inner rescue-standard | inner rescue-all        | ensure         | the caller gets
 *   ------------+-----------------------+-------------------------+----------------+-----------------------
 *   RAISE       | catches it (swallowed)| catches it (swallowed)  | runs, once     | the block's own result
 *   THROW       | skipped               | skipped                 | runs, once     | TMO_ETIMEDOUT
 *   EXCEPTION   | skipped               | sees it; re-raising it  | runs, once     | TMO_ETIMEDOUT (the block's
 *               |                       | -> TMO_ETIMEDOUT        |                | result if a rescue-all
 *               |                       |                         |                | swallows it)
 *
 *   RAISE     — a Timeout::Error, which is a standard error: the naive
 *               delivery; a catch-all in the block swallows the timeout and
 *               the block runs on (Bug #8730).
 *   THROW     — CRuby's old catch/throw: a non-local exit to the scope's own
 *               catch; no rescue sees it, every ensure runs exactly once, and
 *               the scope's boundary converts it to "execution expired".
 *   EXCEPTION — ruby/timeout today (Timeout::ExitException < Exception): an
 *               exception-level interrupt that `rescue => e` does not match,
 *               `rescue Exception => e` does; re-raising it (tmo_reraise)
 *               converts to "execution expired" at the boundary.
 *
 * Identity and nesting: every scope has a 64-bit id that is never reused in
 * the process (not its stack address, which the next scope may reuse), and
 * the interrupt carries the id of the scope that expired (struct
 * tmo_exc.scope).  A scope converts only its own interrupt; an outer scope's
 * interrupt passes an inner scope's boundary untouched (the inner scope still
 * cancels its timer and runs the ensures on the way), and so do an error of
 * the timeout class that the block raised itself (tmo_raise(TMO_EXC_TIMEOUT,
 * ...) carries scope 0) and a saved interrupt of an earlier scope re-raised
 * with tmo_reraise().  When several scopes of one thread have expired and
 * none was delivered yet, the outermost one is delivered: its unwinding passes
 * every inner boundary, and the inner scopes' interrupts are discarded as they
 * exit.  "Expired" is decided by the clock at delivery, not by which engine
 * callback happened to run first: an engine that runs callbacks concurrently
 * (the thread engine) may mark an inner scope before the outer one whose
 * deadline passed first or at the same time, and the outer one still wins.
 *
 * No late interrupt: when the block returns, the scope cancels its engine
 * timer and waits for a running callback (TMO_CANCEL_WAITED) before it
 * returns; an expiry that was not yet delivered is discarded.  So a block that
 * returned never sees its scope's interrupt afterwards, however close to the
 * deadline it returned, and tmo_scope_run() then returns 0 with the block's
 * value.  Each scope delivers its interrupt at most once: after a RAISE-mode
 * rescue swallowed it, the block runs on uninterrupted (as in Ruby).
 *
 * Masking (Ruby's Thread.handle_interrupt(Timeout::Error => :never)):
 * between tmo_mask() and the matching tmo_unmask() no interrupt is delivered;
 * blocking waits in the region are not cut short by an expiry.  The pending
 * interrupt is delivered by the tmo_unmask() that leaves the outermost masked
 * region.  Unwinding to a frame restores the mask depth the frame was entered
 * with.
 *
 * What is and is not safe (setjmp/longjmp)
 * -----------------------------------------
 * Raising unwinds with longjmp to the innermost frame (rescue, ensure or
 * scope) of the calling thread; each frame handles the exception and passes it
 * on to the next.  setjmp lives only inside this library, in functions whose
 * automatic variables do not change after setjmp, so the library itself never
 * reads an indeterminate local.  For the block's code the rules are:
 *  - A raise abandons every C frame between the raise point and the frame that
 *    handles it: those frames must be this library's, or your own C code that
 *    holds nothing a cleanup must release — or registers that cleanup with
 *    tmo_ensure().  Locks held across an interruption point need an ensure
 *    that unlocks them (tmo_cond_wait re-acquires its mutex before it raises,
 *    as pthread cancellation does).
 *  - Never raise across foreign frames: C++ frames with destructors, a library
 *    that calls back into your code (qsort, a libevent loop), a signal
 *    handler, or another thread.  Interrupts are delivered only at the
 *    interruption points above, synchronously, never from a signal.
 *  - If you write your own setjmp-based code around these calls, locals you
 *    modify after your setjmp and read after a longjmp back must be volatile.
 *    The function-pointer API below exists so that you need not: state that
 *    a handler must see goes through the argument pointer (memory), not
 *    through locals of an abandoned frame.
 *  - A raise with no frame on the thread prints the exception and aborts: it
 *    is a program error, like an uncaught exception.
 *  - A scope must return on the thread that entered it; frames and masks are
 *    per thread and never cross threads.
 *
 * The waits (tmo_sleep, tmo_cond_*, tmo_queue_*) are declared in tmo/wait.h,
 * which this header includes.
 *
 * Errors: functions that can fail return 0 (or a non-negative result) or a
 * negative enum tmo_error (tmo.h), which also holds the outcomes of a scope
 * (TMO_ETIMEDOUT, TMO_ERAISED); tmo_strerror() and tmo_errname() name them
 * all.
 */
#ifndef TMO_SCOPE_H
#define TMO_SCOPE_H

#include <stdint.h>

#include "tmo/tmo.h"
#include "tmo/wait.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results ----------------------------------------------------------- */

/* A scope's own outcomes are enum tmo_error values (include/tmo/tmo.h):
 * TMO_ETIMEDOUT, the scope's deadline passed and its interrupt reached the
 * scope's boundary ("execution expired"); TMO_ERAISED, an exception raised
 * in the block (not this scope's interrupt) left the scope and no outer
 * frame on this thread takes it: it is in *exc.  tmo_strerror() and
 * tmo_errname() name them. */

/* The message of TMO_ETIMEDOUT, as Ruby spells it. */
#define TMO_EXPIRED_MESSAGE "execution expired"

/* ---- exceptions ---------------------------------------------------------- */

/* Classes, as in Ruby's hierarchy:
 *   Exception
 *     StandardError            TMO_EXC_STANDARD
 *       Timeout::Error         TMO_EXC_TIMEOUT
 *     Timeout::ExitException   TMO_EXC_INTERRUPT
 *   (throw)                    TMO_EXC_THROW: not an exception at all */
enum tmo_exc_class {
	TMO_EXC_STANDARD = 1,
	TMO_EXC_TIMEOUT = 2,
	TMO_EXC_INTERRUPT = 3,
	TMO_EXC_THROW = 4,
};

struct tmo_exc {
	enum tmo_exc_class cls;
	int code;            /* the raiser's code; TMO_ETIMEDOUT for interrupts */
	const char *message; /* not copied: static storage, or alive long enough */
	/* The id of the scope whose expiry produced this exception (what
	 * tmo_scope_current() returned inside it), or 0 when the code raised it
	 * itself.  Ids are never reused in the process. */
	uint64_t scope;
};

/* Rescue filters: which classes a rescue frame catches.  A throw is never
 * caught by a rescue. */
#define TMO_RESCUE_CLASS(cls) (1u << (cls))
/* `rescue => e`: standard errors, Timeout::Error included. */
#define TMO_RESCUE_STANDARD (TMO_RESCUE_CLASS(TMO_EXC_STANDARD) | TMO_RESCUE_CLASS(TMO_EXC_TIMEOUT))
/* `rescue Exception => e`: everything that is an exception. */
#define TMO_RESCUE_ALL (TMO_RESCUE_STANDARD | TMO_RESCUE_CLASS(TMO_EXC_INTERRUPT))
/* `rescue Timeout::Error => e` */
#define TMO_RESCUE_TIMEOUT TMO_RESCUE_CLASS(TMO_EXC_TIMEOUT)

typedef intptr_t tmo_block_fn(void *arg);
typedef intptr_t tmo_handler_fn(const struct tmo_exc *exc, void *arg);
typedef void tmo_ensure_fn(void *arg);

/* Raise an exception of class cls (STANDARD, TIMEOUT or INTERRUPT; the
 * exception carries no scope) to the innermost frame of this thread.  A throw
 * cannot be raised by hand: cls TMO_EXC_THROW (or any unknown class) aborts,
 * as does a raise with no frame on the thread. */
_Noreturn void tmo_raise(enum tmo_exc_class cls, int code, const char *message);

/* Raise exc again, unchanged: its class and its scope identity are kept, so a
 * rescue-all that re-raises an EXCEPTION-mode interrupt lets the scope
 * convert it.  exc may point at the copy a handler was given. */
_Noreturn void tmo_reraise(const struct tmo_exc *exc);

/* `begin; body; rescue <filter> => e; handler; end`.
 * Runs body(arg).  If an exception whose class is in filter unwinds to this
 * frame, handler(exc, harg) runs (exc points at a copy that lives until the
 * handler returns) and its value is the result; anything else passes on.
 * Returns 0 with *value = body's value, 1 with *value = handler's value, or
 * TMO_ENULLCB (body or handler NULL) / TMO_EINVAL (filter empty or with bits
 * that are not exception classes) / TMO_ESYS (the thread's context could not
 * be set up: mutex or condvar init failed).  value may be NULL. */
int tmo_rescue(unsigned filter, tmo_block_fn *body, void *arg, tmo_handler_fn *handler,
               void *harg, intptr_t *value);

/* `begin; body; ensure; ensure_fn; end`.
 * Runs body(arg), then ensure(earg) exactly once, whether body returned or
 * anything (exception or throw) unwound through it; then returns 0 with
 * *value = body's value, or passes the unwinding on.  The ensure runs with
 * the mask depth of entry; an exception raised by the ensure replaces the one
 * passing through (as in Ruby).  Returns TMO_ENULLCB if body or ensure is
 * NULL, TMO_ESYS as tmo_rescue.  value may be NULL. */
int tmo_ensure(tmo_block_fn *body, void *arg, tmo_ensure_fn *ensure, void *earg,
               intptr_t *value);

/* ---- scopes -------------------------------------------------------------- */

enum tmo_scope_mode {
	TMO_SCOPE_RAISE = 1,
	TMO_SCOPE_THROW = 2,
	TMO_SCOPE_EXCEPTION = 3,
};

/* Run block(arg) on the calling thread with a deadline timeout_ns from now on
 * engine (timeout_ns 0: no deadline, the engine is not used).
 *
 * Returns:
 *  0                 the block returned: *value is its result.  This holds
 *                    even when the deadline passed as it returned;
 *  TMO_ETIMEDOUT     this scope's interrupt reached the boundary; *exc is
 *                    {TMO_EXC_TIMEOUT, TMO_ETIMEDOUT, "execution expired",
 *                    this scope's id};
 *  TMO_ERAISED       an exception of the block's own left the scope and no
 *                    outer frame exists on this thread: it is in *exc (with an
 *                    outer frame, the exception passes on to it instead and
 *                    this call does not return);
 *  TMO_ENULLENGINE   engine NULL with timeout_ns > 0;
 *  TMO_ENULLCB       block NULL;
 *  TMO_EBADTIMEOUT   timeout_ns negative or above TMO_TIMEOUT_MAX;
 *  TMO_EINVAL        mode unknown;
 *  TMO_ESYS          the thread's context could not be set up;
 *  TMO_EDEADLK       called on a thread that runs this engine's callbacks
 *                    one at a time (inside one of its callbacks, on an engine
 *                    without TMO_CAP_CONCURRENT_CALLBACKS): the scope's own
 *                    timer could never fire while the block runs there.  The
 *                    block did not run; the engine is unaffected;
 *  TMO_EFORKED       the engine was inherited across fork() (tmo.h);
 *  TMO_ENOMEM, TMO_EAGAIN  the engine could not arm (the block did not run).
 * value and exc may be NULL.
 *
 * Synchronization: the engine's callback touches only this thread's wake-up
 * state; the engine must outlive the call.  A scope costs one arm and one
 * cancel on the engine, no allocation. */
int tmo_scope_run(struct tmo *engine, int64_t timeout_ns, enum tmo_scope_mode mode,
                  tmo_block_fn *block, void *arg, intptr_t *value, struct tmo_exc *exc);

/* The id of the innermost scope running on this thread, or 0. */
uint64_t tmo_scope_current(void);

/* Non-zero once scope `id` expired: its engine callback marked it, or its
 * interrupt was delivered (delivered or not, masked or not).  0 when no scope
 * with that id is running on the calling thread.  O(nesting depth). */
int tmo_scope_expired(uint64_t id);

/* Non-zero when an interrupt has been marked for this thread and not yet
 * delivered (masked, or no interruption point reached yet). */
int tmo_interrupt_pending(void);

/* What this thread's scopes did (thread-local counters, never reset):
 * evidence for the race scenarios that the edge cases happened. */
struct tmo_scope_stats {
	uint64_t scopes;    /* tmo_scope_run calls that ran their block */
	uint64_t expired;   /* of those, scopes that expired: marked by their
	                       callback, or delivered (delivered + discarded) */
	uint64_t delivered; /* interrupts raised at an interruption point */
	/* Expiries thrown away because the block had returned (or the scope
	 * was being left) first: each one is a late interrupt prevented. */
	uint64_t discarded;
};
void tmo_scope_stats(struct tmo_scope_stats *out);

/* ---- interruption points ---------------------------------------------- */

/* The waits of tmo/wait.h are interruption points too. */

/* Deliver a pending interrupt now, if any and not masked.  When none is
 * pending it costs a call and a thread-local read (2-7 ns measured on the
 * 2-core dev machine): call it freely in busy loops. */
void tmo_check(void);

/* Mask interrupts (nestable).  tmo_unmask() leaving the outermost region is
 * an interruption point; unbalanced unmask aborts. */
void tmo_mask(void);
void tmo_unmask(void);
/* Current mask depth of this thread (0: unmasked). */
int tmo_mask_depth(void);

#ifdef __cplusplus
}
#endif
#endif /* TMO_SCOPE_H */
