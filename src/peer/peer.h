/*
 * The peer-engine core: what every adapter over an outside timer library
 * shares (libev, libev_loop, libuv, libuv_loop, glib, uring, timerfd).  The
 * design is written here once; each engine's file says what its library
 * adds or lacks.
 *
 * The loop lock
 * -------------
 * One engine mutex `m` guards the records, the timers' private words and
 * every call into the library.  The engine's loop thread holds `m` at all
 * times except (i) while it is blocked waiting for events (the library's
 * poll: libev's release/acquire callbacks, GLib's poll function, libuv's
 * backend descriptor polled by us, io_uring_wait_cqe, epoll_wait) and
 * (ii) while a callback runs (or a function handed to the loop, below).  So
 * whenever another thread holds `m`, the library is at rest: a fork handler
 * that takes `m` leaves the child a library it can free, and a thread-safe
 * library (GLib, io_uring, timerfd) can be called under `m` from any
 * thread.
 *
 * Records
 * -------
 * Each arm takes a record (from a small free list, else tmo__malloc) that
 * holds the caller's timer, callback, argument, the absolute deadline
 * (CLOCK_MONOTONIC, read at arm entry) and the library's timer object
 * (be->area bytes at area_off: an ev_timer, a uv_timer_t, a GSource *, a
 * timerfd, an io_uring timespec).  The caller's timer holds only a pointer
 * to its record (struct peer_priv).  A record is in exactly one list:
 *   queue    QUEUED (to start) or REARM (to stop, then start) by the loop
 *            thread: arms from other threads of a library whose timers
 *            belong to its loop thread (libev, libuv), then a wake-up
 *            (ev_async_send, uv_async_send) coalesced while one is owed;
 *   stopping STOPPING (to stop) by the loop thread: started timers that
 *            other threads cancelled.  An arm that finds the free list
 *            empty takes the oldest of these instead of allocating (it
 *            becomes REARM: the loop thread stops its library timer, then
 *            starts it for the new arm), so records never outnumber the
 *            pending timers plus the free list, however far the loop
 *            thread lags behind other threads' arms and cancels;
 *   started  STARTED in the library;
 *   due      DUE: expired (the library reported it, or it was queued past
 *            its deadline), callback not started; in deadline order
 *            before each callback (a burst is sorted once, not walked);
 *   dead     stopped, the library may still report it (PEER_ASYNC_STOP:
 *            io_uring's completion of a removed timeout, an epoll event
 *            already collected for a closed timerfd); the backend releases
 *            it when that can no longer happen;
 *   free     up to PEER_FREE_MAX idle records (no allocation in the steady
 *            state; what is beyond it is freed).
 * Arms and cancels made on the loop thread (a callback, a function run by
 * tmo_testing_run_on_loop) and, for thread-safe libraries, from any thread
 * call the library at once.
 *
 * Exactly once: a record's state changes only under `m`; the library's
 * expiry reaches tmo__peer_fire(), which takes only a STARTED record (a cancel
 * made it QUEUED->freed, REARM or STARTED->STOPPING, or ->DEAD) into `due`; the loop
 * thread then runs the due callbacks one at a time in deadline order
 * (never from inside the library's dispatch), taking in what other threads
 * queued before each one, so an arm still queued when the library
 * collected later expiries runs before them (order: a library collects a
 * whole turn's expiries at once, GLib dispatches them in attach order),
 * and asking the library for a turn first when a timer it has not
 * reported yet might be due more than the resolution before the next
 * callback's (collect, lag_ns: an arm drained past its deadline when the
 * loop thread fell behind).
 * Never early: tmo__peer_fire() compares the clock with the record's deadline
 * and, when the library fired early (millisecond loop clocks, a coarse
 * clock, rounding), starts the library's timer again for the remainder.
 * Cancel waits for a running callback through the callback gate
 * (src/core/gate.h) and answers TMO_CANCEL_SELF inside it; a wait that
 * would deadlock across engines (the gate's check, core/internal.h) is
 * refused with TMO_EDEADLK before the cancel changed anything.
 *
 * Destroy sets `stop` (tmo__peer_fire then runs nothing more), wakes and joins
 * the loop thread (which finishes a running callback first), stops what is
 * still started or queued (their timers become idle) and frees everything.
 *
 * fork(): the core refuses every call in the child (TMO_EFORKED).  A
 * pthread_atfork prepare handler takes every peer engine's `m` (waiting at
 * most PEER_FORK_LOCK_NS for each: a callback or poll releases it), so the
 * child inherits the library at rest; destroy_forked then lets the backend
 * free the library's state and close the child's copies of its descriptors
 * without touching what the parent uses (no epoll_ctl on a shared epoll
 * set, no io_uring submission), and frees the records.  An engine whose
 * mutex was not free in time is left in the child as it is (only the
 * engine's own struct is freed).  A callback that forks ends, in the child,
 * with its thread (tmo__end_if_forked).
 */
#ifndef TMO_PEER_PEER_H
#define TMO_PEER_PEER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/gate.h"
#include "core/internal.h"
#include "core/list.h"

#define PEER_FREE_MAX 64
#define PEER_FORK_LOCK_NS TMO_NSEC_PER_SEC
#define PEER_COLLECT_NS (TMO_NSEC_PER_MSEC / 4)

enum peer_state {
	PR_FREE = 0,
	PR_QUEUED,
	PR_STARTED,
	PR_DUE,
	PR_STOPPING,
	PR_FIRING,
	PR_DEAD,
	PR_REARM
};

struct peer;

struct peer_rec {
	struct tmo_list link; /* in exactly one of the lists above, under m */
	struct peer *eng;
	struct tmo_timer *timer;
	tmo_callback *cb;
	void *arg;
	int64_t deadline; /* absolute CLOCK_MONOTONIC ns */
	int state;        /* enum peer_state, under m */
	bool lib_init;    /* the backend initialised its object (libuv) */
	/* then, at eng->area_off: the backend's be->area bytes */
};

/* What the engine keeps in the caller's timer (written under m; atomic
 * because arm reads `rec` without it). */
struct peer_priv {
	_Atomic(struct peer_rec *) rec; /* the pending arm's record, NULL otherwise */
	atomic_uint fired;              /* the last arm's callback started */
};
TMO__PRIV_FITS(struct peer_priv);

enum peer_flags {
	/* start and stop may be called from any thread (under m) */
	PEER_ANY_THREAD = 1u << 0,
	/* after stop the library may still report the record: it goes to
	 * `dead` and the backend calls tmo__peer_release() */
	PEER_ASYNC_STOP = 1u << 1,
	/* the library's expiries come from the kernel's per-CPU timer bases
	 * (a kernel timer per arm), which it reports in the order they
	 * expired there, not in deadline order: guarantee 4's named limit
	 * (tmo.h).  The core counts each one that arrives after a callback of
	 * a deadline more than the resolution later ran (tmo_stats' skewed). */
	PEER_KERNEL_EXPIRY = 1u << 2,
};

/* A library behind the core.  Every op runs under m. */
struct peer_backend {
	const char *name; /* thread name: "tmo-<name>" */
	size_t area;      /* bytes of the library's per-record object */
	unsigned flags;   /* enum peer_flags */
	/* Arm answers TMO_EAGAIN with this many timers pending (0: no bound). */
	uint64_t max_pending;
	/* Create the library's loop (on the creating thread) or fail with a
	 * named error; fini frees it after the loop thread was joined. */
	int (*init)(struct peer *e);
	void (*fini)(struct peer *e);
	/* Start r's library timer so that it cannot expire before r->deadline;
	 * `now` is a clock reading taken before this call.  On the loop thread
	 * (or any thread with PEER_ANY_THREAD); also to restart a record whose
	 * library timer expired early.  0 or a negative TMO error. */
	int (*start)(struct peer *e, struct peer_rec *r, int64_t now);
	/* Stop r's library timer (started, maybe already expired). */
	void (*stop)(struct peer *e, struct peer_rec *r);
	/* After r's callback returned: release its per-arm library resources
	 * (NULL: nothing). */
	void (*done)(struct peer *e, struct peer_rec *r);
	/* Free a record's memory; the backend may defer it (libuv: uv_close).
	 * NULL: tmo__free. */
	void (*rec_free)(struct peer *e, struct peer_rec *r);
	/* Make the loop thread return from iterate soon (any thread). */
	void (*wake)(struct peer *e);
	/* Loop thread: wait for events once, releasing m only while blocked
	 * (peer_unlock/peer_lock), and report expiries through tmo__peer_fire. */
	void (*iterate)(struct peer *e);
	/* Loop thread, under m, optional: one turn of the library that
	 * reports through tmo__peer_fire every expiry already due by its
	 * clock, without blocking (and without releasing m).  The core calls
	 * it before a callback that a started timer not yet reported might
	 * have to precede (see `lag_ns`), every PEER_COLLECT_NS while other
	 * threads keep the loop thread busy, and, for PEER_KERNEL_EXPIRY,
	 * between callbacks at most every PEER_COLLECT_NS (a timer the kernel
	 * reported late does not wait behind a long due list). */
	void (*collect)(struct peer *e);
	/* With collect: how far past its deadline a started timer may still go
	 * unreported by a turn whose clock was read after a given reading C of
	 * ours (every unreported one is due after C - lag_ns): the library's
	 * clock granularity and its lag behind ours.  The core runs a due
	 * record only when no started timer due more than the resolution
	 * earlier can be unreported (guarantee 4 when the loop thread is
	 * starved: tmo__peer_run_due).  0 for kernel timers, whose late
	 * reports are the named limit (PEER_KERNEL_EXPIRY).  The core copies
	 * it into the engine before init, which may raise it (a clock the
	 * library picks at run time). */
	int64_t lag_ns;
	/* In a child after fork, library at rest: free the library's state and
	 * close the child's descriptors, touching nothing the parent uses. */
	void (*fini_forked)(struct peer *e);
};

struct peer {
	struct tmo_base base;
	const struct peer_backend *be;
	void *lib; /* the backend's state (its loop, ring, epoll set) */
	size_t area_off, rec_size;
	pthread_t thread;

	pthread_mutex_t m;
	struct tmo__gate gate; /* under m */
	struct tmo_list queue, stopping, started, due, dead, free; /* under m */
	uint64_t nfree, records, pending, fired, cancelled;
	/* under m: the latest deadline a callback ran for (INT64_MIN: none
	 * yet), and the expiries that arrived after it had run one due more
	 * than the resolution later (PEER_KERNEL_EXPIRY only) */
	int64_t fired_max;
	uint64_t skewed;
	bool stop;  /* under m: destroy began, tmo__peer_fire runs nothing */
	bool woken; /* under m: a wake-up is owed to the loop (coalesced) */
	bool due_unsorted; /* under m: `due` needs sorting before a callback */
	/* under m: a clock reading taken before the library's latest turn
	 * (iterate or collect), and whether the first due record must wait for
	 * the library to report an earlier started timer (tmo__peer_run_due) */
	int64_t collected_at;
	bool held;
	int64_t lag_ns; /* be->lag_ns, or what be->init found */

	/* tmo_testing_run_on_loop: one function at a time (work_mu). */
	pthread_mutex_t work_mu;
	pthread_cond_t work_cv; /* monotonic; waits under m */
	void (*work_fn)(void *);
	void *work_arg;
	bool work_done;

	struct tmo_list fork_link;
	bool fork_locked; /* the prepare handler holds m */
};

static inline struct peer_priv *peer_priv(struct tmo_timer *t)
{
	return TMO__PRIV(struct peer_priv, t);
}
static inline void *peer_area(struct peer *e, struct peer_rec *r)
{
	return (char *)r + e->area_off;
}
static inline bool peer_on_loop(const struct peer *e)
{
	return tmo__thread_engine == (const struct tmo *)(const void *)e;
}
static inline void peer_lock(struct peer *e) { pthread_mutex_lock(&e->m); }
static inline void peer_unlock(struct peer *e) { pthread_mutex_unlock(&e->m); }

/* The vtable entries (`struct tmo` is a `struct peer`); each engine's
 * create calls tmo__peer_create with its backend. */
int tmo__peer_create(const struct peer_backend *be, struct tmo **out);
void tmo__peer_destroy(struct tmo *self);
int tmo__peer_arm(struct tmo *self, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                  void *arg);
int tmo__peer_cancel(struct tmo *self, struct tmo_timer *t);
int tmo__peer_stats(struct tmo *self, struct tmo_stats *out);
void tmo__peer_destroy_forked(struct tmo *self);
/* The run_on_loop testing op (tmo/testing.h). */
int tmo__peer_run_on_loop(struct tmo *self, void (*fn)(void *), void *arg);

/* Backend, loop thread, under m: r's library timer expired (r joins `due`,
 * or is started again if the library fired early; never releases m). */
void tmo__peer_fire(struct peer *e, struct peer_rec *r);
/* Backend, under m: a DEAD record can no longer be reported. */
void tmo__peer_release(struct peer *e, struct peer_rec *r);

#define PEER_ENGINE_OPS(create_fn)                                                \
	.create = create_fn, .destroy = tmo__peer_destroy, .arm = tmo__peer_arm,         \
	.cancel = tmo__peer_cancel, .stats = tmo__peer_stats,                            \
	.destroy_forked = tmo__peer_destroy_forked

#endif /* TMO_PEER_PEER_H */
