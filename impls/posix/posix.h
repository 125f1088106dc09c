/*
 * The posix engine's slots and engine state (impls/posix.c: the design),
 * shared by its slot pool and kernel timers (impls/posix/slots.c; the slot pool's get is posix.c's) and its
 * engine thread (impls/posix/loop.c).
 */
#ifndef TMO_POSIX_POSIX_H
#define TMO_POSIX_POSIX_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "core/internal.h"
#include "core/park.h"

#define TMO_POSIX_SIGNAL_OFFSET 6

#define PX_CHUNK_SHIFT 10
#define PX_CHUNK (1u << PX_CHUNK_SHIFT)
/* The order resolution (impls/posix.c, Resolution: per-CPU expiry skew). */
#define PX_RESOLUTION TMO_NSEC_PER_MSEC
/* 8 Mi slots: far above any RLIMIT_SIGPENDING, so the kernel runs out first. */
#define PX_MAX_CHUNKS 8192u
#define PX_NIL UINT32_MAX
#define PX_GEN_MASK 0x7fffffffu
#define PX_FIRED_BIT (UINT64_C(1) << 32)
/* sival of the control timer: index PX_NIL, generation 0 (never a slot's). */
#define PX_CTRL ((uint64_t)PX_NIL)

enum px_state { S_FREE = 0, S_ARMED, S_FIRING, S_DONE, S_CANCELLED };
/* px_attempt's "the callback has started: wait for it" (not an error). */
#define PX_BUSY 100

struct px_slot {
	_Atomic uint64_t word; /* gen << 8 | enum px_state */
	timer_t ktimer;        /* written by arm before word = ARMED */
	struct tmo_timer *timer;
	tmo_callback *cb;
	void *arg;
	_Atomic uint32_t next; /* free list / returned stack link */
	/* Absolute deadline of the current arm, for tmo__px_main's window; relaxed:
	 * a stale value only misplaces an entry whose CAS then fails. */
	_Atomic int64_t deadline;
};

/* What the engine keeps in the caller's timer: word 0, non-zero while armed
 * or fired. */
struct px_priv {
	_Atomic uint64_t ref; /* gen << 33 | fired << 32 | index; 0 = idle */
};
TMO__PRIV_FITS(struct px_priv);

struct tmo {
	struct tmo_base base;
	int signo;
	pid_t tid; /* the engine thread's, for SIGEV_THREAD_ID */
	pthread_t thread;
	timer_t ctl; /* control timer: stop and park requests */

	/* Control requests: set the flag (stop, park.req), then kick (see
	 * ctl_kick). */
	atomic_int stop;
	struct tmo__park park;
	atomic_int ctl_out; /* a control signal is outstanding */

	/* Cancels waiting for a running callback, and the drain; the start-up
	 * handshake (started, start_rc) on wm and wait_cv too. */
	pthread_mutex_t wm;
	pthread_cond_t wait_cv;  /* a callback returned; the thread started */
	bool started;
	int start_rc; /* the control timer's creation, on the engine thread */
	pthread_cond_t drain_cv; /* the last waiter has looked */
	atomic_uint waiters;
	_Atomic(struct tmo_timer *) running; /* whose callback runs now */
	/* Its invocation (core/internal.h), stored before the slot turns
	 * FIRING and before `running` names it. */
	_Atomic uint64_t cb_ref;

	/* Slot table: dir has PX_MAX_CHUNKS entries, chunks never move. */
	struct px_slot **dir;
	atomic_uint nslots;       /* published slots (chunks * PX_CHUNK) */
	pthread_mutex_t free_mu;  /* free_head, growing the table */
	uint32_t free_head;
	atomic_uint ret_head;     /* lock-free stack of returned slots */

	atomic_ullong pending, fired, cancelled;
	atomic_ullong skewed; /* tmo_stats' `skewed` (loop.c, px_note_skew) */
};

static inline struct px_priv *priv(struct tmo_timer *t)
{
	return TMO__PRIV(struct px_priv, t);
}

static inline struct px_slot *slot_at(struct tmo *e, uint32_t i)
{
	return &e->dir[i >> PX_CHUNK_SHIFT][i & (PX_CHUNK - 1)];
}

static inline uint64_t mkword(uint32_t gen, enum px_state s) { return (uint64_t)gen << 8 | s; }
static inline uint32_t word_gen(uint64_t w) { return (uint32_t)(w >> 8) & PX_GEN_MASK; }
static inline uint64_t mkref(uint32_t gen, uint32_t idx) { return (uint64_t)gen << 33 | idx; }
static inline uint32_t ref_idx(uint64_t r) { return (uint32_t)r; }
static inline uint32_t ref_gen(uint64_t r) { return (uint32_t)(r >> 33); }

/* ---- slots (get: posix.c) and kernel timers (impls/posix/slots.c) ---------- */

/* Give a slot back; any thread, no lock: a push-only Treiber stack (taken
 * whole by px_slot_get's exchange, so no ABA). */
static inline void px_slot_put(struct tmo *e, uint32_t i)
{
	struct px_slot *s = slot_at(e, i);
	uint32_t h = atomic_load_explicit(&e->ret_head, memory_order_relaxed);
	do
		atomic_store_explicit(&s->next, h, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&e->ret_head, &h, i, memory_order_release,
	                                              memory_order_relaxed));
}

/* Ask the engine thread to look at stop and park.req. */
void tmo__px_ctl_kick(struct tmo *e);
/* A one-shot CLOCK_MONOTONIC kernel timer signalling the engine thread with
 * `sival`: 0, TMO_EAGAIN, TMO_ENOMEM or TMO_ESYS. */
int tmo__px_make_ktimer(struct tmo *e, uint64_t sival, timer_t *out);

/* ---- the engine thread (impls/posix/loop.c) ------------------------------ */

void *tmo__px_main(void *arg);

#endif /* TMO_POSIX_POSIX_H */
