/*
 * What the parts of the lock-free core's fuzz target share (tests/fuzz/lf.c:
 * the program and its ops; lf_model.c: the model's transitions, settles and
 * the checks after each op; lf_pool.c: the node pool's audit; lf_threads.c:
 * the callback and the helper threads): the sizes, the model's records and
 * the one state they all read, `fz`.  The rules they check: lf.c's top.
 */
#ifndef TMO_FUZZ_LF_H
#define TMO_FUZZ_LF_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "input.h"
#include "lf/debug.h"
#include "lf/clock.h"
#include "lf/depot.h"
#include "lf/lf.h"

#define TIMERS 64
#define SCRATCH TIMERS /* T0's ring walker at the end */
#define HELPERS 2
#define MAX_OPS 1024
#define MAX_ARMS (2 * MAX_OPS + 64)
#define MAX_SETTLES 6 /* a settle costs a tick or more: bound them */
#define US TMO_NSEC_PER_USEC
#define LONG_NS (INT64_C(1) << 42) /* 73 min: never fires here */
/* Waits on state are bounded far beyond need: never hit when correct. */
#define LIVENESS_NS (60 * TMO_NSEC_PER_SEC)
#define PAGE_NODES 64u
#define SOFT_NODES 4096u /* pool.c's soft limit */
#define RC_UNSET (-1000)

/* ---- the model ------------------------------------------------------------------ */

enum tstate { T_IDLE, T_FIRED, T_LONG, T_DUE };

/* One arm (or a callback's re-arm): the callback's argument. */
struct arm {
	int timer;
	int due; /* its timeout is at most 2 ms: it fires at the next settle */
	int self_cancel;
	int slow; /* its callback takes a while: a racing cancel waits for it */
	int next; /* the re-arm its callback makes, or -1 */
	int64_t timeout;
	int64_t t_arm; /* a clock read just before the arm */
	_Atomic int expect; /* -1 undecided, 0 never fires, 1 fires once */
	_Atomic int fired;
	_Atomic int rearm_rc; /* the re-arm's result (stored before `fired`) */
};

struct tmodel {
	enum tstate st;
	int cur;       /* its latest arm while armed or fired */
	int uncertain; /* armed due while the timer thread runs: may fire now */
	unsigned out;  /* word outcome while not armed: LF_NONE/FIRED/CANCELLED_OUT */
};

enum { CALL_ARM, CALL_CANCEL, CALL_EXIT };
struct call {
	int op, idx;
	struct arm *a;
	int rc;
	int64_t avail; /* free nodes the arm could take, read just before it */
};

struct helper {
	pthread_t th;
	int live;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int busy;
	struct call c;
};

struct fz {
	struct tmo *e;
	int wheel;
	uint64_t cap;
	int64_t res;
	struct tmo_timer t[TIMERS + 1];
	struct tmodel m[TIMERS + 1];
	struct arm arms[MAX_ARMS];
	int n_arms;
	int running;
	_Atomic int quiet; /* a settle runs: no thread but the timer thread arms */
	uint64_t fired, prevented;
	uint64_t prevents_since_settle;
	/* a settle waits until then: a due arm handed over to the timer thread
	 * (a wheel's soon list) that a cancel dropped after the timer thread
	 * took it waits in its due array until its deadline, no later than its
	 * cancel + timeout */
	int64_t transit_until;
	int arm_limit; /* records the ops may use: the end keeps a few */
	int settles;
	struct helper h[HELPERS];
	/* what the program reached (FUZZ_LF_TRACE=1 prints it) */
	int n_eagain, n_raced, n_waited, n_helper, n_exits;
	_Atomic int n_rearm_refused;
};

/* The one program's state (lf.c defines it; LLVMFuzzerTestOneInput zeroes
 * it for each input). */
extern struct fz fz;

/* The model's states by name, for the reports (enum tstate). */
extern const char *const state_name[];

/* Armed, long or due, in the model. */
static inline int is_pending(const struct tmodel *m) { return m->st == T_LONG || m->st == T_DUE; }

/* ---- lf_pool.c ---------------------------------------------------------------------- */

/* Free nodes an arm on this thread could take (the TMO_EAGAIN rule, lf.c). */
int64_t pool_avail(uint64_t own_cache);
/* Every check of the node accounting; `exact`: nothing may be in transit
 * and no ring holds a cancelled arm (the end of a draining program). */
void audit(int exact);

/* ---- lf_threads.c ------------------------------------------------------------------- */

/* The callback of every arm; arg is its struct arm. */
void on_fire(struct tmo_timer *t, void *arg);
/* Runs c on T0 (thread 0) or on helper thread 1 or 2, and waits for it. */
void call_on(int thread, struct call *c);
/* Helper k's thread ends (its record is detached); none: nothing. */
void helper_exit(int k);

/* ---- lf_model.c --------------------------------------------------------------------- */

/* Arm a's fate: v 1 fires once, 0 never (its re-arm neither). */
void decide(struct arm *a, int v);
/* a, timer m's current arm, was prevented by a cancel. */
void prevent(struct tmodel *m, struct arm *a);
/* A cancel of racing timer i returned rc: resolved by the callback counters. */
void cancel_raced(int i, int rc);
/* Unpark the timer thread while ops go on (due timers race the cancels). */
void run_start(void);
/* Park it again; every due timer that fired meanwhile is resolved. */
void run_stop(void);
/* Run the timer thread until every due timer has fired, then park it. */
void settle(void);
/* tmo_stats against the model. */
void check_stats(void);
/* Every arm's callback count against the model (callbacks done: parked). */
void check_arms(void);
/* The checks after an op while parked: stats and the pool's audit. */
void check_parked(void);

#endif
