/*
 * The throughput scenario's parts (throughput.c is the scenario): its sizes,
 * the state its benchmarks share, and the Google Benchmark bodies (bench.c),
 * whose loops are what the scenario measures.
 */
#ifndef SK_THROUGHPUT_TP_H
#define SK_THROUGHPUT_TP_H

#include <stdatomic.h>
#include <stddef.h>

#include "kit/gbench.h"
#include "kit/util.h"

/* The sizes are throughput.c's table (sk_size); these bound them. */
#define ROUNDS_MAX 64 /* the seed's rounds, at most */
#define BATCH 100     /* divides every ops size */
#define LIVE_THREAD_MAX 1000
#define RING 256 /* cross-thread ring (power of two) */
#define MAX_THREADS 256
#define HELD_NS TMO_NSEC_PER_MSEC
#define REFUSED_MAX_NS (10 * TMO_NSEC_PER_SEC)
#define HELD_RING (1u << 16) /* timers a thread may hold in the held case */
#define MAX_INSTANCES 100

struct tp_slot {
	_Alignas(64) struct tmo_timer t;
	atomic_uint cas_word; /* the floor's line: owned by its thread */
};

/* One thread's timers in the held case: a FIFO of HELD_RING. */
struct tp_held {
	struct tmo_timer *t;
	int64_t *at; /* when each was armed (one clock read per batch) */
	uint64_t head, tail;
	double hold_ns_sum;
	uint64_t holds;
};

struct tp_ctx {
	const struct sk_run *run;
	struct tmo *e;
	struct tp_slot slots[MAX_THREADS];
	struct tp_held *held; /* per thread */
	atomic_llong arm_errors, cancel_errors, fired, refused;
	_Atomic int first_error; /* first unexpected return value */
	/* cross: timers travel producer -> consumer in `armed`, back in `free` */
	struct tmo_timer *pool;
	_Alignas(64) struct tmo_timer *armed[RING];
	_Alignas(64) atomic_ullong armed_head;
	_Alignas(64) atomic_ullong armed_tail;
	_Alignas(64) struct tmo_timer *free_[RING];
	_Alignas(64) atomic_ullong free_head;
	_Alignas(64) atomic_ullong free_tail;
};

/* The benchmark bodies (sk_gb_fn, ctx a struct tp_ctx). */
void bench_seed(sk_gb_state *st, void *arg);  /* arm+cancel around an empty block */
void bench_held(sk_gb_state *st, void *arg);  /* each timer held ~1 ms, then cancelled */
void bench_empty(sk_gb_state *st, void *arg); /* the loop alone */
void bench_floor(sk_gb_state *st, void *arg); /* an uncontended CAS pair */
void bench_cross(sk_gb_state *st, void *arg); /* armed on one thread, cancelled on another */
void tp_seed_op(struct tp_ctx *c, struct tmo_timer *t);
/* The held case's per-thread FIFOs (c->held), and their release. */
void tp_held_alloc(const struct sk_run *run, struct tp_ctx *c, int nthreads);
void tp_held_free(struct tp_ctx *c, int nthreads);

/* Arm `n` background timers with long random timeouts.  Returns how many
 * were armed (fewer if the engine ran out: its error is in *err). */
size_t tp_arm_background(struct tp_ctx *c, struct tmo_timer *bg, size_t n, struct sk_rng *rng,
                         int *err);
/* Cancel them; returns the cancels that did not prevent their timer. */
size_t tp_cancel_background(struct tp_ctx *c, struct tmo_timer *bg, size_t n);

#endif
