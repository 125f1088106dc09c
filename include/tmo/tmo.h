/*
 * tmo — interchangeable timeout engines behind one vtable.
 *
 * Overview
 * --------
 * An engine runs callback(timer, arg) once, on a thread the engine owns, no
 * earlier than `timeout_ns` after tmo_arm() was called (CLOCK_MONOTONIC),
 * unless tmo_cancel() prevents it first.  Every engine in the registry keeps
 * the same contract; what an engine cannot keep it declares in its `caps`
 * and the tests show it.
 *
 * The timer is intrusive and caller-owned: embed a struct tmo_timer in your
 * own object and recover the object in the callback with tmo_container_of().
 * Engines keep what they need inside the timer's opaque `tmo_private` words
 * and never in its public fields.
 *
 * Errors: every function returns 0 (or a non-negative result) on success and
 * a negative `enum tmo_error` on failure; tmo_strerror() names it.
 *
 * Synchronization table
 * ---------------------
 * Rows and columns are operations on ONE engine.  "same" means on the same
 * timer, "other" on a different timer of that engine.
 *
 *                     | arm(other) | cancel(other) | arm(same) | cancel(same) | destroy
 *   ------------------+------------+---------------+-----------+--------------+--------
 *   arm               |    yes     |     yes       |    no[1]  |    no[1]     |  no
 *   cancel            |    yes     |     yes       |    no[1]  |    yes[2]    |  no
 *   inside callback   |    yes     |     yes       |    yes[3] |    yes[4]    |  no[5]
 *   destroy           |    no      |     no        |    no     |    no        |  no
 *
 *   [1] The caller serializes arm and cancel of one timer; the engine reports
 *       misuse it can see (TMO_EARMED) but does not promise to see it all.
 *   [2] Concurrent cancels of one timer are allowed: exactly one of them
 *       reports TMO_CANCEL_PREVENTED (or all report it fired).
 *   [3] A callback may re-arm its own timer; a cancel racing with that from
 *       another thread waits for the callback, then cancels the new arm.
 *   [4] Cancel of its own timer from inside its callback returns at once
 *       with TMO_CANCEL_SELF (it must not, and does not, wait for itself).
 *   [5] Destroy (and tmo_testing_park) from a thread the engine owns, a callback
 *       above all, is refused with TMO_EDEADLK; the engine stays usable.
 *
 * From inside a callback: arm and cancel any timer of any engine (its own
 * timer: [3] and [4]), create engines and destroy OTHER engines.  Not
 * allowed, and refused with TMO_EDEADLK (the call changes nothing and the
 * engine keeps working): tmo_destroy() and tmo_testing_park() of the engine whose
 * thread runs the callback, which would wait for that very thread.  Never
 * wait in a callback for something that waits for this callback (a lock the
 * canceller of this timer holds, the case of two engines below).
 *
 * Destroy's promise: every timer whose callback has not started is
 * cancelled, never run (a due one included, and whatever a running callback
 * arms while destroy waits for it); destroy waits for the callbacks that are
 * running and returns after they have; nothing runs after it returns.  The
 * timers it cancelled are idle: re-initialise them (tmo_timer_init) to use
 * them with another engine.
 *
 * Different engines are fully independent of each other, with one
 * exception that is the waiting cancel's nature (as with Linux's
 * timer_delete_sync()): when a callback of engine A cancels a timer of
 * engine B while a callback of B cancels a timer of A, each would wait for
 * the other's callback forever.  tmo refuses that wait: before a cancel
 * waits for a running callback it looks whether the thread running that
 * callback is itself waiting, directly or through a chain of engines (or of
 * one engine's concurrent callbacks), for the callback running on the
 * calling thread; if so the cancel returns TMO_EDEADLK at once (Cancel's
 * Return list, below).  When two such cancels start at the same moment at
 * least one is refused, possibly both.  A cancel from a thread that runs no
 * callback can close no cycle and is never refused.  Waits that are not
 * cancels (destroy of another engine from a callback, a lock the other
 * callback holds) are not checked: never wait in a callback for something
 * that waits for this callback.
 *
 * Ownership: a timer belongs to the engine of its first successful arm
 * (tmo_timer.owner holds that engine's id) until tmo_timer_init().
 * tmo_arm() and tmo_cancel() check it, and nothing else does: through any
 * other engine they answer TMO_EWRONGENGINE, so one timer is never in two
 * engines, and an engine's ops only ever see timers whose private words
 * are their own or all-zero.
 *
 * Identity: engines are recognised by a 64-bit id that is never reused in
 * the process (not by address), so a timer left on a destroyed engine is
 * refused by an engine that malloc later puts at the same address
 * (TMO_EWRONGENGINE), never misread.
 *
 * fork(): in a child process every engine inherited from the parent
 * refuses every call with TMO_EFORKED (its threads do not exist there, and
 * nothing the child does may disturb the parent's engine).  tmo_destroy()
 * in the child frees the child's copy of the engine without touching the
 * parent's threads, descriptors or kernel timers.  Create new engines in
 * the child.  A callback that calls fork() returns, in the child, into a
 * copy of the engine's thread, the child's only thread: that thread ends
 * when the callback returns, and with it the child (exit status 0, as when
 * a process's last thread exits); exec or _exit in the child instead.
 * Per engine, what the child's tmo_destroy frees:
 *   thread    fork() first takes every thread engine's mutex; the child's
 *             destroy frees the records (their threads do not exist
 *             there: nothing is joined), never the inherited mutex and
 *             condition variables.
 *   mpsc,     nothing is taken at fork (arm and cancel hold no lock the
 *   wheel     child could need); the child's destroy unmaps the node
 *             arena and frees records, bases and the timer thread's
 *             arrays, waiting on no lock: an arm or cancel another parent
 *             thread was inside at the fork leaves nothing the child uses.
 *   condvar   fork() first takes every condvar engine's mutex (no heap
 *             is mid-update at the fork); the child's destroy frees the
 *             engine and its heap array (the array is left only if the
 *             engine was parked), never the inherited mutex and condition
 *             variables (glibc's pthread_cond_destroy waits for the
 *             parent's waiting thread).
 *   libevent  fork() first quiesces every libevent engine (its thread stops
 *             where it holds no libevent lock, no arm or cancel is inside
 *             libevent), waiting up to 1 s per engine for a running
 *             callback; the child's destroy then gives the base its own
 *             epoll set (event_reinit), frees it and the records, and closes
 *             the child's copies of the descriptors without removing them
 *             from the epoll set the parent uses.  An engine that was parked
 *             or ran a callback past the bound leaves libevent's base and
 *             its descriptors in the child, untouched.
 *   posix     POSIX timers are not inherited: the slot table and the engine;
 *             no timer_delete (in the child the parent's timer ids may name
 *             the child's own timers).
 *
 * Callback stack: every engine runs callbacks on a stack of at least
 * TMO_CALLBACK_STACK_MIN bytes.
 *
 * Threads: every thread an engine starts is named "tmo-<engine>" (its
 * comm, as ps -L, top -H and gdb show it); tmo_stats' `threads` counts
 * the ones it owns.
 *
 * Guarantees (checked by tests/ and the harness scenarios)
 * --------------------------------------------------------
 *  1. Exactly once: for every arm that returned 0, either the callback runs
 *     once, or exactly one cancel returns TMO_CANCEL_PREVENTED.
 *  2. Never early: the callback never starts before arm-time + timeout.
 *  3. Bounded lateness: `resolution_ns` is the engine's own granularity;
 *     lateness is measured (expiry scenario), not assumed.
 *  4. Order: deadlines further apart than the resolution fire in order,
 *     however late the engine's threads run: a timer thread starved of CPU
 *     fires late (lateness grows, and is reported), never out of order.
 *     The one named limit: an engine whose expiries reach it from a source
 *     it does not order (the kernel's per-CPU timer bases, for posix,
 *     timerfd and uring) says
 *     so in its header and counts every timer that reached it after it had
 *     run one due more than the resolution later (tmo_stats' `skewed`);
 *     the expiry scenario reports such inversions as that limit, and as
 *     violations where they outnumber the count.
 *  5. Independence: cancelling one timer never affects another.
 *  6. No retention: a cancelled timer's engine-side state is released within
 *     a bounded time that does not grow with its timeout.
 */
#ifndef TMO_TMO_H
#define TMO_TMO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

enum tmo_error {
	TMO_OK = 0,
	TMO_EBADTIMEOUT = -1,  /* timeout negative or above TMO_TIMEOUT_MAX */
	TMO_ENULLCB = -2,      /* callback is NULL */
	TMO_ENULLTIMER = -3,   /* timer is NULL */
	TMO_EARMED = -4,       /* arm of a timer that is already armed */
	TMO_ENOTARMED = -5,    /* cancel of a timer that was never armed, or
	                          whose arm another cancel already prevented */
	TMO_EWRONGENGINE = -6, /* timer belongs to a different engine (its
	                          first arm was there; tmo_timer_init() frees
	                          it for another engine once resolved) */
	TMO_ENOMEM = -7,       /* out of memory */
	TMO_EAGAIN = -8,       /* out of a bounded resource: threads, kernel
	                          timers, or (mpsc, wheel) the nodes or inbox
	                          backlog a lock-free engine allows; nothing was
	                          armed, and asking again later may succeed */
	TMO_ENOENGINE = -9,    /* no engine of that name */
	TMO_ENULLENGINE = -10, /* engine handle is NULL (never created, or
	                          already destroyed through tmo_destroy) */
	TMO_EINVAL = -11,      /* other invalid argument (config fields) */
	TMO_ESYS = -12,        /* an unexpected system call failure */
	TMO_EDEADLK = -13,     /* the call would wait for the calling thread
	                          itself: destroy, park or a scope from a thread
	                          the engine owns (inside one of its callbacks);
	                          or a cancel from inside a callback would wait
	                          for a callback that, directly or through a
	                          chain, waits for this one (tmo_cancel) */
	TMO_EFORKED = -14,     /* the engine was created before fork() in the
	                          parent process: create a new one in the child */
	TMO_EUNAVAIL = -15,    /* create: the kernel facility the engine is
	                          built on is unavailable here (uring: io_uring
	                          disabled by sysctl, refused by seccomp in a
	                          container, ENOSYS under an emulator) */
	/* The scope runtime's outcomes (tmo/scope.h). */
	TMO_ETIMEDOUT = -64,   /* the scope's deadline passed: "execution expired" */
	TMO_ERAISED = -65,     /* an exception raised in the block left the scope */
};

/* Name of an error ("TMO_EBADTIMEOUT") and its meaning in words. */
const char *tmo_strerror(int err);
const char *tmo_errname(int err);

/* ---- time ---------------------------------------------------------------- */

#define TMO_NSEC_PER_SEC INT64_C(1000000000)
#define TMO_NSEC_PER_MSEC INT64_C(1000000)
#define TMO_NSEC_PER_USEC INT64_C(1000)
/* The longest timeout accepted (about 146 years): deadlines computed as
 * CLOCK_MONOTONIC + timeout cannot overflow int64_t. */
#define TMO_TIMEOUT_MAX (INT64_C(1) << 62)

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t tmo_now_ns(void);

/* Every engine runs callbacks on a stack of at least this many bytes. */
#define TMO_CALLBACK_STACK_MIN (256 * 1024)

/* ---- timers ------------------------------------------------------------ */

struct tmo_timer;
typedef void tmo_callback(struct tmo_timer *timer, void *arg);

#define TMO_TIMER_PRIVATE_WORDS 6

/* Caller-owned timer.  Initialise with TMO_TIMER_INIT or tmo_timer_init()
 * (all-zero bytes are also a valid idle timer).  Between a successful arm and
 * its resolution (callback returned, or a cancel returned) the caller must
 * not free or move it.  A timer belongs to the engine of its first arm: to
 * use it with another engine (or after that engine was destroyed), call
 * tmo_timer_init() again once its last arm has resolved. */
struct tmo_timer {
	tmo_callback *cb; /* written by arm; read-only for the caller */
	void *arg;        /* written by arm; read-only for the caller */
	/* The id of the engine this timer belongs to, 0 for none (Ownership,
	 * above).  Never touched by engines or the caller. */
	uint64_t owner;
	/* Engine-private words: never touched by the caller. */
	uint64_t tmo_private[TMO_TIMER_PRIVATE_WORDS];
};

#define TMO_TIMER_INIT {0, 0, 0, {0}}
void tmo_timer_init(struct tmo_timer *t);

#define tmo_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- engines ----------------------------------------------------------- */

/* Capabilities: what an engine does beyond, or short of, the base contract.
 * A declared capability is a promise a test checks for every engine that
 * declares it: LOCKFREE_ARM the progress scenario, NO_SYSCALL and NO_ALLOC
 * tests/engine/caps.c, PARK tests/engine/lifecycle.c (and the progress
 * scenario), CONCURRENT_CALLBACKS tests/unit/thread_callbacks.c,
 * RUN_ON_LOOP tests/engine/run_on_loop.c. */
enum tmo_cap {
	/* arm and cancel never wait for the timer thread or a callback: they
	 * take no lock the timer thread holds while it runs its loop or a
	 * callback, and where a bound is reached they answer TMO_EAGAIN at once
	 * rather than wait (progress scenario: they proceed while the timer
	 * thread is parked, and while a callback blocks) */
	TMO_CAP_LOCKFREE_ARM = 1u << 0,
	/* arm and cancel make no system call unless a wake-up is needed */
	TMO_CAP_NO_SYSCALL = 1u << 1,
	/* arm and cancel do not allocate in the steady state */
	TMO_CAP_NO_ALLOC = 1u << 2,
	/* 1u << 3 is retired (it named bucketed deadlines, a promise no test
	 * could check): never reuse it, the harness names bits by position */
	/* callbacks of one engine may run concurrently on several threads */
	TMO_CAP_CONCURRENT_CALLBACKS = 1u << 4,
	/* one OS thread per armed timer */
	TMO_CAP_THREAD_PER_TIMER = 1u << 5,
	/* the engine has a park hook (tmo_testing_park, tmo/testing.h): its
	 * timer thread can be held at a point inside its loop */
	TMO_CAP_PARK = 1u << 6,
	/* the engine runs a function on its loop thread, where arm and cancel
	 * call the library directly (tmo_testing_run_on_loop, tmo/testing.h;
	 * tests/engine/run_on_loop.c) */
	TMO_CAP_RUN_ON_LOOP = 1u << 7,
};

struct tmo_config {
	/* Granularity for engines that have one (the wheel's tick).
	 * 0 means the engine's default. */
	int64_t resolution_ns;
	/* Reserved, must be 0. */
	uint32_t flags;
};

/* What the engine holds right now (retention and memory-plateau figures). */
struct tmo_stats {
	uint64_t pending;      /* armed, neither fired nor cancelled */
	uint64_t held_nodes;   /* engine-side records alive, cancelled-but-not-
	                          yet-released and free-list nodes included */
	uint64_t held_bytes;   /* bytes the engine holds for timers (pools,
	                          heaps, wheels, records), excluding its fixed
	                          size at creation */
	uint64_t threads;      /* threads the engine currently owns */
	uint64_t fired;        /* callbacks run since create */
	uint64_t cancelled;    /* cancels that prevented a callback */
	uint64_t skewed;       /* timers whose expiry reached the engine after
	                          it had run one due more than its resolution
	                          later (guarantee 4's named limit); always 0
	                          for an engine that orders every expiry */
};

struct tmo; /* an engine instance; its layout is private to the engine */
struct tmo_testing_ops; /* tmo/testing.h */

/* Cancel's results (non-negative); errors are negative enum tmo_error. */
enum tmo_cancel_result {
	TMO_CANCEL_PREVENTED = 0, /* the callback will never run for this arm */
	TMO_CANCEL_FIRED = 1,     /* the callback already ran and returned */
	TMO_CANCEL_WAITED = 2,    /* the callback was running on another
	                             thread; cancel waited until it returned */
	TMO_CANCEL_SELF = 3,      /* called from inside this timer's own
	                             callback: it is running, cancel returns at
	                             once */
};

struct tmo_engine_ops {
	const char *name;          /* "wheel" */
	const char *summary;       /* one line: the design */
	unsigned caps;             /* enum tmo_cap bits */
	int64_t resolution_ns;     /* default resolution */

	/* Create an engine; starts its threads.  Returns 0 and sets *out, or
	 * TMO_EINVAL / TMO_ENOMEM / TMO_EAGAIN. */
	int (*create)(const struct tmo_config *cfg, struct tmo **out);

	/* Cancel every timer whose callback has not started (due ones, and
	 * what a running callback arms meanwhile, included), wait for the
	 * running callbacks, join every thread, free everything; no callback
	 * runs after it returns.  Never called from a thread the engine owns
	 * (the core refuses that with TMO_EDEADLK). */
	void (*destroy)(struct tmo *self);

	/* Schedule timer->cb(timer, arg) once, no earlier than timeout_ns from
	 * now.  Returns 0, or TMO_EARMED, TMO_ENOMEM, TMO_EAGAIN.  After 0 the
	 * timer is never lost: it fires or a cancel prevents it.  The op may
	 * assume what tmo_arm() checks (timer and cb non-NULL, 0 <= timeout_ns
	 * <= TMO_TIMEOUT_MAX); call ops through tmo_arm() unless you checked. */
	int (*arm)(struct tmo *self, struct tmo_timer *timer, int64_t timeout_ns,
	           tmo_callback *cb, void *arg);

	/* Cancel.
	 *
	 * Synchronization: callable from any thread and from any callback.  The
	 * caller must not hold a lock that the timer's callback takes (cancel
	 * may wait for that callback).  Two callbacks (of two engines, or two
	 * concurrent ones of one engine: TMO_CAP_CONCURRENT_CALLBACKS) that
	 * cancel each other's timers while both run would wait for each other,
	 * as with Linux's timer_delete_sync(): tmo refuses such a wait with
	 * TMO_EDEADLK instead (also for a longer cycle of callbacks).
	 *
	 * On return the engine holds no reference to @timer: it may be freed or
	 * armed again at once (unless TMO_CANCEL_SELF: then the callback itself
	 * is still running, and it owns the timer).
	 *
	 * Return:
	 *  TMO_CANCEL_PREVENTED - the callback was pending and will never run;
	 *  TMO_CANCEL_FIRED     - the callback already ran and has returned;
	 *  TMO_CANCEL_WAITED    - the callback was running on another thread;
	 *                         cancel returned only after it returned;
	 *  TMO_CANCEL_SELF      - called from inside that callback;
	 *  TMO_EDEADLK          - called from inside a callback, the timer's
	 *                         callback is running on another thread, and
	 *                         that thread waits (in a cancel, directly or
	 *                         through a chain) for the callback this call is
	 *                         made from: waiting would deadlock, so cancel
	 *                         returned at once and changed nothing.  The
	 *                         timer is NOT cancelled: its callback is still
	 *                         running and will return (it owns the timer: do
	 *                         not free or re-arm it now), and an arm it made
	 *                         stays pending and fires as usual.  Nothing is
	 *                         lost (every arm is still fired or cancelled
	 *                         once).  Return from this callback rather than
	 *                         retry in a loop (the other side waits for it);
	 *                         cancel again from elsewhere if still needed;
	 *  TMO_ENULLTIMER, TMO_ENOTARMED, TMO_EWRONGENGINE on bad input.
	 */
	int (*cancel)(struct tmo *self, struct tmo_timer *timer);

	/* Fill *out with what the engine holds now.  Returns 0. */
	int (*stats)(struct tmo *self, struct tmo_stats *out);

	/* In a child process after fork(): free the child's copy of the
	 * engine (memory, the child's own descriptors) without joining threads
	 * (they do not exist in the child) and without touching anything the
	 * parent still uses (shared epoll sets, kernel timers).  NULL: the copy
	 * is left as it is. */
	void (*destroy_forked)(struct tmo *self);

	/* Test hooks (struct tmo_testing_ops, tmo/testing.h), or NULL: none.
	 * Never used by the production paths. */
	const struct tmo_testing_ops *testing;
};

/* Every struct tmo starts with this header (engines embed it first and
 * never write it: the core sets it). */
struct tmo_base {
	const struct tmo_engine_ops *ops;
	/* Never reused in this process: what timers record as their owner.
	 * In a child after fork() the core sets it to TMO__FORKED_ID, which no
	 * timer holds, so the inline checks below take their slow path. */
	uint64_t id;
};
#define TMO__FORKED_ID UINT64_MAX

/* ---- registry and the checked public entry points ----------------------- */

/* NULL-terminated table of every engine built into this library. */
const struct tmo_engine_ops *const *tmo_engines(void);
/* Engine ops by name, or NULL. */
const struct tmo_engine_ops *tmo_engine_find(const char *name);

/* Create an engine by name (cfg may be NULL).  TMO_ENOENGINE if unknown. */
int tmo_create(const char *name, const struct tmo_config *cfg, struct tmo **out);
int tmo_create_ops(const struct tmo_engine_ops *ops, const struct tmo_config *cfg,
                   struct tmo **out);
/* Destroy *engine and set it to NULL: destroy's promise above (cancels what
 * has not started, waits for what runs, runs nothing afterwards).
 * TMO_ENULLENGINE if already NULL; TMO_EDEADLK (and *engine untouched, the
 * engine usable) when called from a thread the engine owns, such as inside
 * one of its callbacks.  In a child after fork(): frees the child's copy
 * (above) and returns 0. */
int tmo_destroy(struct tmo **engine);

/* tmo_arm() and tmo_cancel() validate their arguments (NULL engine, NULL
 * timer, NULL callback, timeout out of range, a timer of another engine, an
 * engine inherited across fork) and then call the engine's op.  They are
 * inline: the checks cost a few instructions on the fast path, and every
 * error is decided out of line by tmo__arm_slow() / tmo__cancel_slow(). */
int tmo__arm_slow(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                  void *arg);
int tmo__cancel_slow(struct tmo *e, struct tmo_timer *t);

static inline const struct tmo_engine_ops *tmo_ops(const struct tmo *e)
{
	return e == NULL ? NULL : ((const struct tmo_base *)(const void *)e)->ops;
}

static inline int tmo_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns,
                          tmo_callback *cb, void *arg)
{
	if (__builtin_expect(e == NULL || t == NULL || cb == NULL ||
	                         (uint64_t)timeout_ns > (uint64_t)TMO_TIMEOUT_MAX,
	                     0))
		return tmo__arm_slow(e, t, timeout_ns, cb, arg);
	const struct tmo_base *b = (const struct tmo_base *)(const void *)e;
	/* Relaxed: the owner is written by the first arm, which the caller
	 * serializes with every other call on this timer. */
	if (__builtin_expect(__atomic_load_n(&t->owner, __ATOMIC_RELAXED) != b->id, 0))
		return tmo__arm_slow(e, t, timeout_ns, cb, arg);
	return b->ops->arm(e, t, timeout_ns, cb, arg);
}

static inline int tmo_cancel(struct tmo *e, struct tmo_timer *t)
{
	if (__builtin_expect(e == NULL || t == NULL, 0))
		return tmo__cancel_slow(e, t);
	const struct tmo_base *b = (const struct tmo_base *)(const void *)e;
	if (__builtin_expect(__atomic_load_n(&t->owner, __ATOMIC_RELAXED) != b->id, 0))
		return tmo__cancel_slow(e, t);
	return b->ops->cancel(e, t);
}

/* Fill *out.  TMO_ENULLENGINE, TMO_EINVAL (out NULL), TMO_EFORKED. */
int tmo_stats(struct tmo *e, struct tmo_stats *out);
/* The engine's id (0 for NULL): what tmo_timer.owner holds once armed. */
uint64_t tmo_id(const struct tmo *e);

#ifdef __cplusplus
}
#endif
#endif /* TMO_TMO_H */
