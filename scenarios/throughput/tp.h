/*
 * The throughput scenario's parts (throughput.c is the scenario): its sizes,
 * the state its benchmarks share, and the Google Benchmark bodies (bench.c),
 * whose loops are what the scenario measures.
 */
#ifndef SK_THROUGHPUT_TP_H
#define SK_THROUGHPUT_TP_H

#include <stdatomic.h>
#include <stddef.h>

#include "ds/heap.h"
#include "ds/wheel.h"
#include "lf/node.h"
#include "lf/schedule.h"
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
#define HELD_REFUSED_NS (10 * TMO_NSEC_PER_MSEC) /* bench.c, held_arm_refused */
#define HELD_RING (1u << 16) /* timers a thread may hold in the held case */
#define MAX_INSTANCES 100

struct tp_slot {
	_Alignas(64) struct tmo_timer t;
	atomic_uint cas_word; /* the floor's line: owned by its thread */
};

/* One thread's timers in the held case: a FIFO of HELD_RING.  A line of
 * its own: its thread writes head, tail and the sums on every pair, and two
 * threads' in one line made the two-thread held figure measure that line's
 * travel (perf: 58 % of the loop's samples on one load of `tail`). */
struct tp_held {
	_Alignas(64) struct tmo_timer *t;
	int64_t *at; /* when each was armed (one clock read per batch) */
	uint64_t head, tail;
	double hold_ns_sum;
	uint64_t holds;
	int capped; /* this run, a refusal outlasted HELD_REFUSED_NS */
};

/* What a loop drives (bench.c: one loop, specialised for each by the
 * compiler): the engine, through tmo_arm and tmo_cancel, or the engine's
 * own structure alone (src/ds), unlocked, on one thread: the limit the
 * engine's locking, dating and filing add to. */
enum tp_on { TP_ENGINE, TP_WHEEL, TP_HEAP, TP_NEAR_FAR };

/* The structure alone (structure.c).  Its clock is the loop's: `now` is
 * read once per batch of BATCH pairs, as the held loop reads it. */
struct tp_ds {
	enum tp_on kind; /* TP_WHEEL, TP_HEAP or TP_NEAR_FAR */
	/* "wheel", "heap": src/ds/<name>.c; "near_far": src/lf/schedule.c's
	 * heap over a wheel, on the engine's own nodes (struct lf_node) */
	const char *name;
	int64_t now;
	struct tmo_wheel wheel;
	struct tmo_heap heap;
	/* HELD_RING nodes for the seed ([0]) and held loops, and the live
	 * loop's background nodes (nbg of them) */
	struct tmo_wheel_node *wn, *wbg;
	struct tmo_heap_node *hn, *hbg;
	const struct lf_sched *sc; /* near_far: its table, state and nodes */
	void *nf;
	struct lf_node *ln, *lbg;
	size_t nbg;
	struct tp_held held; /* the held loop's FIFO (t unused: the nodes) */
	long long fired; /* nodes the wheel handed out as due: none should be */
};

struct tp_ctx {
	const struct sk_run *run;
	struct tmo *e;
	struct tp_ds *ds; /* NULL: the engine has no structure in the tree */
	struct tp_ds *ds2; /* the second thread's at two threads (or NULL) */
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
	/* handoff: the line the two threads pass back and forth */
	_Alignas(64) atomic_ullong handoff;
	/* While the rounds run (tp_register_rounds): each repetition's place
	 * in their order, the counter "round" in its report. */
	_Alignas(64) int rounds_on, round_seq;
};

/* The benchmark bodies (sk_gb_fn, ctx a struct tp_ctx). */
void bench_seed(sk_gb_state *st, void *arg);  /* arm+cancel around an empty block */
void bench_held(sk_gb_state *st, void *arg);  /* each timer held ~1 ms, then cancelled */
void bench_empty(sk_gb_state *st, void *arg); /* the loop alone */
void bench_floor(sk_gb_state *st, void *arg); /* an uncontended CAS pair */
void bench_cross(sk_gb_state *st, void *arg); /* armed on one thread, cancelled on another */
void bench_handoff(sk_gb_state *st, void *arg); /* a cache line's round trip, 2 threads */
/* The seed and held loops on the structure alone (c->ds, one thread). */
void bench_ds_seed(sk_gb_state *st, void *arg);
void bench_ds_held(sk_gb_state *st, void *arg);
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

/* The structure alone (structure.c): the engine's own structure (wheel:
 * src/ds/wheel.c; condvar: src/ds/heap.c; mpsc: near/far, src/lf/schedule.c),
 * or NULL when it has none in the tree, or when memory is short (printed). */
struct tp_ds *tp_ds_new(const struct sk_run *run);
int tp_ds_fired(const struct sk_run *run, const struct tp_ds *d);
void tp_ds_free(struct tp_ds *d);
/* Fill it with n background nodes, the timeouts drawn as
 * tp_arm_background draws them; returns 0 or -1 (out of memory).  Drain
 * takes them out again and returns how many were no longer in it. */
int tp_ds_fill(struct tp_ds *d, size_t n, struct sk_rng *rng);
size_t tp_ds_drain(struct tp_ds *d);
/* near_far's collect hands a due node here (none should be: op_batch
 * counts them in `fired`). */
void tp_ds_due(void *ctx, struct lf_node *n);
/* File node n in near_far as mpsc's timer thread files (take.c, file_tt:
 * aux names the timer thread's base first). */
static inline int tp_nf_insert(struct tp_ds *d, struct lf_node *n, int64_t deadline)
{
	atomic_store_explicit(&n->aux, LF_IN_TT, memory_order_relaxed);
	return d->sc->insert(d->nf, n, deadline);
}

/* What one engine instance measured (throughput.c fills it, report.c
 * reports it). */
struct tp_figs {
	double seed_ns, empty_ns, floor_ns, cross;
	double handoff_ns; /* a cache line's round trip between two threads */
	double ops_s[MAX_THREADS + 1];  /* seed, by threads */
	double held_s[MAX_THREADS + 1]; /* held 1 ms, by threads */
	double held_hold_ns;            /* the mean hold, at one thread */
	double live_ns[3];
	double refused; /* arms asked again after TMO_EAGAIN, every case */
	/* the structure alone (NaN: none): seed ns, held pairs/s at one
	 * thread and at two (each its own), live ns */
	double ds_seed_ns, ds_held_s, ds_held2_s, ds_live_ns[3];
};

extern const size_t tp_lives[3];
/* The figures' rows and printout (report.c), the end-of-run table. */
void tp_report(const struct sk_run *run, const struct tp_figs *figs, int ninst, int nthreads);
void tp_summary(const struct sk_results *res);
extern const struct sk_target tp_targets[];

#endif
