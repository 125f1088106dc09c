/*
 * The thread engine's records and engine state (impls/thread.c: the design),
 * and its turns (impls/thread/turns.c: fire order without polling).  Private to
 * those two files.
 */
#ifndef TMO_THREAD_THREAD_H
#define TMO_THREAD_THREAD_H

#include <stdatomic.h>
#include <stdbool.h>

#include "core/internal.h"
#include "core/list.h"
#include "ds/heap.h"

/* Deadlines are exact; this is the order granularity (see Order,
 * impls/thread/turns.c) and the declared resolution. */
#define THREAD_RESOLUTION_NS TMO_NSEC_PER_MSEC
/* How long a callback runs before a waiter looks whether its thread is
 * past the call (see Order): the most a long callback delays a later timer. */
#define ENTRY_GRACE (THREAD_RESOLUTION_NS / 4)
/* CPU time a thread uses between recording its own and calling the
 * callback is well under a microsecond; this much more proves it called.
 * Far more than that: interrupts that arrive in between are charged to the
 * thread (no IRQ time accounting on this kernel). */
#define ENTRY_CPU_PROOF (100 * TMO_NSEC_PER_USEC)

enum rec_state {
	R_WAITING,   /* thread sleeps until the deadline (and its turn) */
	R_CANCELLED, /* its canceller (or destroy) joins the thread */
	R_RUNNING,   /* the callback runs on the record's thread */
	R_DONE,      /* callback returned; the thread is finished or finishing */
};

struct rec {
	struct tmo_heap_node node; /* in e->heap while WAITING and not held */
	pthread_cond_t cv;         /* monotonic: the thread's sleep, callback-done */
	pthread_t th;
	struct tmo *e;
	/* Dereferenced only while the record is WAITING (the timer is then
	 * pending, so the caller keeps it alive); afterwards only compared. */
	struct tmo_timer *timer;
	int64_t deadline;
	enum rec_state state;
	enum { IN_NONE, IN_BLOCKED, IN_ENTERING } in; /* which pairing heap */
	/* Cancels waiting for this callback, and later timers waiting for
	 * their turn: no reap while > 0. */
	uint32_t waiters;
	/* Written by the record's thread just before the call, without the
	 * mutex: its own CPU time and the clock, then `entered` (release). */
	atomic_bool entered;
	int64_t entered_cpu, entered_at;
	pid_t tid; /* the record's thread, for /proc (written before entered) */
	tmo__cbref ref; /* its callback's invocation, under the mutex while RUNNING */
	struct rec *ph_child, *ph_next, *ph_prev; /* pairing heap; ph_prev: parent
	                                             or left sibling */
	struct tmo_list run_link; /* e->running while RUNNING */
	struct tmo_list all_link; /* e->all, from arm to free */
	struct rec *next;         /* e->done, and the lists reap() takes */
};

enum timer_state {
	T_IDLE = 0, /* all-zero timer: never armed, or its arm was prevented */
	T_PENDING,  /* `rec` is WAITING */
	T_FIRED,    /* its callback started (running or returned) */
};

/* What the engine keeps in the caller's timer (all under e->m). */
struct thr_priv {
	struct rec *rec;     /* valid while T_PENDING only */
	uint32_t state;      /* enum timer_state */
	uint32_t cancelling; /* cancels in progress: the pending arm is held */
};
TMO__PRIV_FITS(struct thr_priv);

struct tmo {
	struct tmo_base base;
	pthread_mutex_t m;
	pthread_attr_t attr;
	struct tmo_heap heap; /* WAITING records, except held ones */
	struct rec *blocked;  /* pairing heap: due, held back by the heap's top */
	struct rec *entering; /* pairing heap: decided, callback not known started */
	struct tmo_list running; /* RUNNING records */
	struct rec *done;        /* DONE, nobody waiting: to be joined */
	struct tmo_list all;     /* every record */
	bool closing;         /* destroy has begun: nothing decides to fire */
	uint64_t npending;
	uint64_t fired_count, cancelled_count;
	/* Decremented after join/free, outside the mutex. */
	atomic_uint_fast64_t threads, records;
	struct tmo_list fork_link; /* in the fork set */
};

static inline struct thr_priv *thr_priv_of(struct tmo_timer *t)
{
	return TMO__PRIV(struct thr_priv, t);
}

static inline struct rec *rec_of(struct tmo_heap_node *n)
{
	return tmo_container_of(n, struct rec, node);
}

/* ---- turns (impls/thread/turns.c); all under the engine mutex ---------------- */

enum turn { TURN_GO, TURN_BLOCKED, TURN_ENTERING };

/* Move r to `blocked`, `entering` or neither (IN_NONE). */
void tmo__thr_set_in(struct tmo *e, struct rec *r, int where);
/* r is in the heap and due: whether it may fire now, and if not, what holds
 * it back: *pred, the record to wait for until *until. */
enum turn tmo__thr_my_turn(struct tmo *e, const struct rec *r, struct rec **pred, int64_t *until);
/* Take a WAITING record out of the heap and of `blocked` (it fires, is
 * cancelled, or is held by a cancel), handing on the turns it held. */
void tmo__thr_unqueue(struct tmo *e, struct rec *r);

/* ---- record sets (impls/thread/records.c) ------------------------------------- */

/* Threads all thread engines of the process hold now. */
extern atomic_int tmo__thr_process_threads;

/* Under the mutex: a DONE record nobody waits on goes to `done`. */
void tmo__thr_done_add(struct tmo *e, struct rec *r);
/* Under the mutex: a record running t's callback, or NULL. */
struct rec *tmo__thr_running_of(struct tmo *e, const struct tmo_timer *t);
/* Under the mutex: a waiter (a cancel waiting for r's callback, or a later
 * timer waiting for its turn) lets go of r. */
void tmo__thr_unwait(struct tmo *e, struct rec *r);
/* Under the mutex: take the DONE records nobody waits on (linked through
 * `next`), to be joined and freed after the unlock. */
struct rec *tmo__thr_take_done(struct tmo *e);
/* Outside the mutex: join the threads of a list of records (cancelled or
 * DONE), then free the records. */
void tmo__thr_reap(struct tmo *e, struct rec *list);

#endif /* TMO_THREAD_THREAD_H */
