/*
 * The service scenario's parts (service.c is the scenario): a worker
 * serving requests (worker.c) and what the workers share.
 *
 * A worker keeps many requests in flight at once, as an event-driven
 * server does: it starts a request (arms its 1-4 timeouts), and completes
 * each request whose service time has passed (cancels them).  Its own
 * bookkeeping is a ring of BUCKETS lists of requests by completion time,
 * BUCKET_NS wide: a request completes at the first bucket boundary at or
 * after its service time, never before.
 */
#ifndef SK_SERVICE_SV_H
#define SK_SERVICE_SV_H

#include <pthread.h>
#include <stdatomic.h>

#include "kit/util.h"

#define SV_TIMEOUTS_MAX 4
#define BUCKET_NS (100 * TMO_NSEC_PER_USEC)
#define BUCKETS 16384 /* 1.64 s: beyond the longest service time, SERVICE_MAX + OUTLIVE_MAX */
#define SERVICE_MAX TMO_NSEC_PER_SEC        /* the log-normal's draws, capped */
#define OUTLIVE_MAX (10 * TMO_NSEC_PER_MSEC) /* an outliving request: its shortest timeout + 1..10 ms */
#define OUTLIVE_PER_10K 100                  /* 1 % of requests are drawn to outlive a timeout */
#define REFUSED_GIVE_UP_NS TMO_NSEC_PER_SEC  /* refused with nothing in flight this long: skip */

/* A timeout's life, kept beside its timer: the callback and the worker's
 * cancel each move it, and a move from the wrong state is a violation. */
enum { SV_IDLE, SV_ARMED, SV_FIRED, SV_CANCELLED };

struct sv_timer {
	struct tmo_timer t;
	int64_t deadline; /* lower bound: the clock read before the arm + timeout */
	int64_t fired_at; /* written by the callback before it publishes `state` */
	atomic_int state;
};

struct sv_req {
	struct sv_req *next; /* in a bucket, or on the free list */
	int n;               /* timeouts armed */
	struct sv_timer to[SV_TIMEOUTS_MAX];
};

/* What every worker and callback shares (one phase: one engine, T workers). */
struct sv_shared {
	const struct sk_run *run;
	struct tmo *e; /* NULL: no engine (arm and cancel are skipped): the harness's own cost */
	int64_t end; /* workers start no request at or after it */
	atomic_int go;
	_Alignas(64) atomic_llong callbacks; /* callbacks run */
	atomic_llong bad_fires;              /* a callback on a timer not armed (twice, or after a cancel) */
};

/* One worker's figures and state. */
struct sv_worker {
	struct sv_shared *sh;
	pthread_t th;
	int index;
	size_t inflight_max;
	struct sk_rng rng;
	struct sv_req *reqs, *free;
	struct sv_req **bucket; /* BUCKETS lists */
	uint64_t cursor;        /* the next bucket index to complete */
	size_t inflight;
	int64_t refused_since;  /* 0: the last arm was taken */
	/* serving window (start .. sh->end) */
	uint64_t requests, arms, full; /* started; timeouts armed; times the cap held it up */
	int64_t cpu_ns;                /* this thread's CPU time in the window */
	/* resolutions, through the drain */
	uint64_t fired, cancelled, refused, early, outlived; /* outlived: requests with a fire */
	uint64_t v_both, v_none, v_arm, v_cancel; /* violations by kind */
	int first_arm_error, first_cancel_error;
	int starved;           /* refused for REFUSED_GIVE_UP_NS with nothing in flight */
	int64_t *late;         /* lateness of the timeouts that fired */
	size_t nlate, late_cap;
};

/* The thread's body (worker.c): serves until sh->end, then completes what
 * is in flight.  Returns NULL. */
void *sv_worker_main(void *arg);

#endif
