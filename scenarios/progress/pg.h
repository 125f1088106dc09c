/*
 * The progress scenario's workers (progress.c is the scenario): each arms and
 * cancels a 1 s timeout flat out, timing every pair and telling a slow pair
 * that was switched out from one that was not (worker.c).
 */
#ifndef SK_PROGRESS_PG_H
#define SK_PROGRESS_PG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kit/util.h"
#include "tmo/testing.h"

/* timers each worker keeps armed in the callback phase (a thread each on a
 * thread-per-timer engine: fewer there) */
#define CB_HELD 4096
#define CB_HELD_THREAD 16
#define MAX_SAMPLES 200000 /* per worker and phase, for the quantiles */
#define SLOW_NS (20 * TMO_NSEC_PER_USEC) /* a pair this slow is told apart */
#define SNAP_EVERY 1024                   /* pairs between switch-count readings */
#define MAX_WORKERS 64

/* PH_* index ops[] and lat[] */
enum { PH_RUNNING = 0, PH_PARKED = 1, PH_CALLBACK = 2, PH_STOP = 3, NPH = 3 };

struct pg_worker {
	_Alignas(64) struct tmo_timer t;
	pthread_t th;
	struct pg_ctx *c;
	atomic_llong ops[NPH];
	_Atomic int64_t op_start; /* 0 when between ops */
	int64_t *lat[NPH];        /* ns per arm+cancel pair (the first MAX_SAMPLES) */
	size_t nlat[NPH];
	int64_t max[NPH];         /* slowest pair of all */
	int64_t max_quiet[NPH];   /* slowest pair not switched out */
	long long preempted[NPH]; /* slow pairs with an involuntary switch */
	long long slept[NPH];     /* slow pairs with a voluntary switch */
	long snap_inv, snap_vol;  /* the last switch-count reading */
	unsigned since_snap;
	struct tmo_timer *held;   /* CB_HELD: the callback phase's window */
	size_t next_held, nheld;
	long long refused[NPH];   /* arms refused with TMO_EAGAIN */
	long long errors;
	int first_error;
};

struct pg_ctx {
	const struct sk_run *run;
	struct tmo *e;
	atomic_int phase;          /* the phase workers run; PH_STOP ends them */
	_Atomic int64_t parked_at; /* park(1) was called; INT64_MAX before */
	int nworkers;
	struct tmo_timer blocker;  /* its callback blocks in the callback phase */
	atomic_int blocker_in, blocker_release;
	struct pg_worker w[MAX_WORKERS];
};

/* A worker's thread (arg: its struct pg_worker) until the phase is PH_STOP. */
void *pg_worker_main(void *arg);
/* The blocker's callback: blocks until blocker_release (arg: the pg_ctx). */
void pg_block_cb(struct tmo_timer *t, void *arg);

#endif
