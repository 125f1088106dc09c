/*
 * The libevent engine's records and engine state (impls/libevent.c: the
 * design), shared with its fork protocol (impls/libevent/fork.c).
 */
#ifndef TMO_LIBEVENT_LIBEVENT_H
#define TMO_LIBEVENT_LIBEVENT_H

#include <event2/event.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/forkset.h"
#include "core/gate.h"
#include "core/internal.h"
#include "core/park.h"

enum rec_state { REC_PENDING = 1, REC_FIRING, REC_CANCELLED };

struct lev_rec {
	struct tmo_list link; /* e->recs while pending, under m (destroy frees it) */
	struct tmo *eng;
	struct tmo_timer *timer;
	tmo_callback *cb;
	void *arg;
	int state; /* enum rec_state, under m */
	/* then, at eng->ev_off: the struct event */
};

/* What the engine keeps in the caller's timer.  Written under the engine mutex; atomic because
 * arm reads `rec` without it. */
struct lev_priv {
	_Atomic(struct lev_rec *) rec; /* the pending record, NULL otherwise */
	atomic_uint fired;             /* the last arm's callback started */
};
TMO__PRIV_FITS(struct lev_priv);

struct tmo {
	struct tmo_base base;
	struct event_base *eb;
	pthread_t thread;
	struct event *ctl; /* internal: stop, park and fork requests */
	size_t ev_off, rec_size;

	pthread_mutex_t m;
	struct tmo__gate gate;  /* under m */
	struct tmo_list recs;   /* pending records, under m */
	uint64_t pending, records, peak, fired, cancelled;

	atomic_int stop; /* set under m: lev_fire starts no callback after it */
	/* The fork handler waits on park.cv too, under park.mu. */
	struct tmo__park park;

	/* fork (impls/libevent/fork.c).  fork_req is set under park.mu; the
	 * engine thread holds at its fork point while it is set (fork_held). */
	struct tmo_list fork_link; /* in the fork set */
	atomic_int fork_req;
	bool fork_held;
	/* Cancels inside event_del (called without `m`), and whether a fork
	 * handler waits for them to leave (under gm). */
	atomic_int outside;
	atomic_int fork_waiting;
	pthread_mutex_t gm;
	pthread_cond_t gcv; /* monotonic */
	bool fork_locked; /* the prepare handler holds m */
	bool fork_safe;   /* quiesced at the last fork: the child may free the base */
};

static inline struct lev_priv *priv(struct tmo_timer *t)
{
	return TMO__PRIV(struct lev_priv, t);
}

static inline struct event *rec_ev(struct tmo *e, struct lev_rec *r)
{
	return (struct event *)(void *)((char *)r + e->ev_off);
}

/* ---- fork (impls/libevent/fork.c) ------------------------------------------- */

/* Live libevent engines; its mutex is also held around event_base_new and
 * event_base_free, which take libevent's global signal lock. */
extern struct tmo__fork_set tmo__lev_forks;
/* Engine thread: hold here while a fork is prepared; called where it holds
 * no libevent lock and not `m`. */
void tmo__lev_fork_point(struct tmo *e);
/* Around a call into libevent made without `m` (a cancel's event_del):
 * entered with m held, left without it. */
void tmo__lev_outside_enter(struct tmo *e);
void tmo__lev_outside_leave(struct tmo *e);
/* The destroy_forked op. */
void tmo__lev_destroy_forked(struct tmo *e);

#endif /* TMO_LIBEVENT_LIBEVENT_H */
