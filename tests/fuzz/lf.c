/*
 * libFuzzer target for the lock-free core (src/lf/) behind the mpsc and
 * wheel engines, against a reference model.
 *
 * The input is a program for one engine and 64 timers.  A header byte picks
 * the engine (mpsc or wheel), its resolution, a node cap
 * (tmo_testing_set_node_cap) and how the program ends; then each op arms or
 * cancels a timer from the fuzzer's own thread (T0) or from one of two
 * helper threads (T1, T2: the op is handed over and waited for, so the
 * order stays the program's while another thread's ring, the cross-thread
 * cancel paths and per-thread bases run), or settles, starts or stops the
 * timer thread, or ends a helper thread (its record is detached: its ring
 * spills, and the next thread on that slot adopts the record and its base).
 *
 * Determinism: the timer thread stays parked (tmo_park) while ops run, so
 * nothing fires and nothing is stolen under them; timeouts are either "due"
 * (0 .. 2 ms) or "long" (an hour and more).  A settle unparks it, waits on
 * state -- every due timer fired, two ticks published after the last
 * transit could be resolved -- and parks it again.  A "run" op unparks it
 * while ops go on: due timers then race with cancels, and the model accepts
 * either outcome of each race but resolves it at once from the callback
 * counters (cancel returns only after a callback has returned).
 *
 * The model, per timer: idle, fired, armed long, armed due.  Checked:
 *  - every arm's result (0, TMO_EARMED, TMO_EBADTIMEOUT, TMO_EAGAIN: rule
 *    below) and every cancel's (PREVENTED, FIRED; WAITED only while running;
 *    TMO_ENOTARMED);
 *  - each arm's callback runs exactly once if it was not prevented, never
 *    if it was (or if the arm was refused), never early, on its own timer;
 *    a callback's cancel of its own timer answers TMO_CANCEL_SELF, its
 *    re-arm (long or due) answers 0;
 *  - tmo_stats: pending, fired and cancelled equal the model's (a range
 *    while due timers race);
 *  - the timer's word (lf.h) says pending, fired, cancelled as the model
 *    does, and a pending timer's node is live (its generation, RING, QUEUED
 *    or IN_STRUCT, pointing back at the timer), distinct from every other
 *    pending timer's node and in no free list;
 *  - the pool, whenever parked: every free node (record caches, the timer
 *    thread's, depot chains, loose) is in exactly one list, each list as
 *    long as its count; the nodes in use are at least the pending arms and
 *    at most those plus what may still be in transit (a ring slot's
 *    cancelled arm waits for its owner: LF_RING_SLOTS per attached record;
 *    a prevented arm's node waits for the next round of the timer thread);
 *    and at the end of a draining program (every timer cancelled, helpers
 *    gone, T0's ring passed over, a settle) exactly none: nothing leaked;
 *  - destroy (parked or not) runs no callback of an armed-long timer, and
 *    leaves pending timers' words cancelled; library allocations return to
 *    where they were before create.
 *
 * The TMO_EAGAIN rule (src/lf/pool.c): an arm takes a node from its
 * thread's cache, else a chain from the depot, else populates pages of the
 * arena up to the cap (or answers TMO_EAGAIN past a soft limit of 4096
 * nodes plus twice the pending arms, which 65 timers never reach: the audit
 * asserts the pool stays below it).  Parked, nothing else moves nodes, so
 * an arm answers TMO_EAGAIN if and only if
 *     its thread's cache + the depot + (cap pages - populated pages) * 64
 * is 0 just before it; the other free nodes are then in other threads'
 * caches (the audit accounts for all of them).  A callback's re-arm is held
 * to the same rule with the timer thread's cache while a settle runs
 * (nothing else arms then).  While running, only an engine with a cap may
 * answer TMO_EAGAIN (frees race with the arm).
 *
 * A record's cache holds at most LF_CACHE_BOUND free nodes (a refill keeps
 * one chain and sends the rest of a growth step to the depot, where every
 * thread can take it: tests/fuzz/corpus/lf/cache_hoard).
 *
 * Any mismatch aborts with "fuzz mismatch".
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "input.h"
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

static struct fz {
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
} fz;


static const char *state_name[] = {"idle", "fired", "armed-long", "armed-due"};

static void nap(void)
{
	struct timespec ts = {0, 20000};
	nanosleep(&ts, NULL);
}

/* ---- the pool, read while nothing moves it ------------------------------------------ */

/* Free nodes an arm on this thread could take (rule at the top). */
static int64_t pool_avail(uint64_t own_cache)
{
	struct lf_pool *p = &fz.e->pool;
	uint64_t pages = atomic_load_explicit(&p->populated_pages, memory_order_relaxed);
	uint64_t cap_pages = p->reserved_nodes_cap / PAGE_NODES;
	return (int64_t)(own_cache + atomic_load_explicit(&p->depot_nodes, memory_order_relaxed) +
	                 (cap_pages - pages) * PAGE_NODES);
}

/* Marks a free list's nodes; returns how many. */
static uint64_t walk_free(struct lf_node *x, uint8_t *seen, uint64_t hwm, const char *what)
{
	uint64_t n = 0;
	for (; x != NULL; x = x->free_next) {
		uintptr_t off = (uintptr_t)((char *)x - fz.e->pool.arena);
		FUZZ_CHECK(off % sizeof *x == 0 && off / sizeof *x < hwm,
		           "%s: a free node outside the populated arena", what);
		uint32_t k = lf_idx_of(fz.e, x);
		FUZZ_CHECK(!seen[k], "node %u is in two free lists, or twice in one (%s)", k, what);
		seen[k] = 1;
		n++;
	}
	return n;
}

static int is_pending(const struct tmodel *m) { return m->st == T_LONG || m->st == T_DUE; }

/* Every check of the node accounting; `exact`: nothing may be in transit
 * and no ring holds a cancelled arm (the end of a draining program). */
static void audit(int exact)
{
	struct tmo *e = fz.e;
	struct lf_pool *p = &e->pool;
	uint64_t hwm = (uint64_t)atomic_load(&p->hwm_pages) * PAGE_NODES;
	uint64_t populated = atomic_load(&p->populated_pages) * PAGE_NODES;
	FUZZ_CHECK(populated <= hwm && hwm <= p->reserved_nodes_cap,
	           "pool: %llu nodes populated, %llu ever, cap %llu", (unsigned long long)populated,
	           (unsigned long long)hwm, (unsigned long long)p->reserved_nodes_cap);
	FUZZ_CHECK(populated < SOFT_NODES, "pool: %llu nodes for %d timers",
	           (unsigned long long)populated, TIMERS);
	uint8_t *seen = calloc(hwm + 1, 1);
	FUZZ_CHECK(seen != NULL, "out of memory");

	uint64_t free_n = 0, attached = 0;
	for (struct lf_rec *r = atomic_load(&e->recs); r != NULL; r = atomic_load(&r->next)) {
		uint64_t n = walk_free(r->cache, seen, hwm, "a record's cache");
		FUZZ_CHECK(n == r->cache_n, "a record's cache holds %llu nodes, counts %u",
		           (unsigned long long)n, r->cache_n);
		FUZZ_CHECK(n <= LF_CACHE_BOUND,
		           "a record's cache holds %llu free nodes, more than LF_CACHE_BOUND (%d), that "
		           "no other thread can take (the depot holds %llu, %llu nodes populated)",
		           (unsigned long long)n, LF_CACHE_BOUND,
		           (unsigned long long)atomic_load(&p->depot_nodes), (unsigned long long)populated);
		free_n += n;
		attached += r->attached != 0;
	}
	uint64_t n = walk_free(e->tt_rec->cache, seen, hwm, "the timer thread's cache");
	FUZZ_CHECK(n == e->tt_rec->cache_n, "the timer thread's cache holds %llu nodes, counts %u",
	           (unsigned long long)n, e->tt_rec->cache_n);
	free_n += n;
	uint64_t dw = atomic_load(&p->depot), depot = 0;
	for (struct lf_node *c = (uint32_t)dw ? lf_node_at(e, (uint32_t)dw - 1) : NULL; c != NULL;
	     c = (struct lf_node *)atomic_load(&c->aux)) {
		FUZZ_CHECK(lf_idx_of(e, c) < hwm, "depot: a chain outside the arena");
		uint32_t want = c->s.chain_n;
		n = walk_free(c, seen, hwm, "a depot chain");
		FUZZ_CHECK(n == want, "a depot chain holds %llu nodes, counts %u",
		           (unsigned long long)n, want);
		depot += n;
	}
	FUZZ_CHECK(depot == atomic_load(&p->depot_nodes), "depot holds %llu nodes, counts %llu",
	           (unsigned long long)depot, (unsigned long long)atomic_load(&p->depot_nodes));
	free_n += depot;
	/* loose nodes are linked through `link`, which shares free_next's place */
	if (p->loose.head != NULL)
		free_n += walk_free(lf_node_of_link(p->loose.head), seen, hwm, "loose");

	uint64_t pending = 0;
	for (int i = 0; i <= TIMERS; i++) {
		struct tmodel *m = &fz.m[i];
		uint64_t w = atomic_load(lf_timer_word(&fz.t[i]));
		if (!is_pending(m)) {
			FUZZ_CHECK(lf_word_out(w) == m->out, "timer %d (%s): word outcome %u, model %u", i,
			           state_name[m->st], lf_word_out(w), m->out);
			continue;
		}
		pending++;
		FUZZ_CHECK(lf_word_out(w) == LF_PENDING, "timer %d (%s): word outcome %u, not pending",
		           i, state_name[m->st], lf_word_out(w));
		uint32_t k = lf_word_idx(w);
		FUZZ_CHECK(k < hwm, "timer %d: its node %u is outside the arena", i, k);
		struct lf_node *x = lf_node_at(e, k);
		uint64_t s = atomic_load(&x->state);
		unsigned st = lf_st_of(s);
		FUZZ_CHECK(lf_gen_of(s) == lf_word_gen(w) &&
		               (st == LF_RING || st == LF_QUEUED || st == LF_IN_STRUCT),
		           "timer %d (pending): its node %u has moved on (state %u, generation %llu, "
		           "the arm's %llu)",
		           i, k, st, (unsigned long long)lf_gen_of(s), (unsigned long long)lf_word_gen(w));
		FUZZ_CHECK(x->timer == &fz.t[i], "timer %d: its node %u names another timer", i, k);
		FUZZ_CHECK(seen[k] == 0, "timer %d (pending): its node %u is %s", i, k,
		           seen[k] == 1 ? "in a free list" : "another pending timer's too");
		seen[k] = 2;
	}
	free(seen);

	FUZZ_CHECK(free_n <= populated, "pool: %llu free nodes of %llu", (unsigned long long)free_n,
	           (unsigned long long)populated);
	uint64_t in_use = populated - free_n;
	uint64_t slack = exact ? 0 : LF_RING_SLOTS * attached + fz.prevents_since_settle;
	FUZZ_CHECK(in_use >= pending && in_use - pending <= slack,
	           "pool: %llu nodes in use, %llu pending arms, at most %llu more in transit "
	           "(a leak%s)",
	           (unsigned long long)in_use, (unsigned long long)pending, (unsigned long long)slack,
	           exact ? ": the program drained everything" : "");
}

/* ---- the callback ------------------------------------------------------------------ */

/* A callback that takes a while, so that a racing cancel finds it running. */
static void linger(const struct arm *a)
{
	int64_t until = tmo_now_ns() + 150 * US;
	while (a->slow && tmo_now_ns() < until)
		;
}

static void on_fire(struct tmo_timer *t, void *arg)
{
	struct arm *a = arg;
	int64_t now = tmo_now_ns();
	FUZZ_CHECK(t == &fz.t[a->timer], "an arm of timer %d fired with another timer", a->timer);
	FUZZ_CHECK(now >= a->t_arm + a->timeout, "timer %d fired early: %lld ns before its deadline",
	           a->timer, (long long)(a->t_arm + a->timeout - now));
	FUZZ_CHECK(atomic_load(&a->expect) != 0,
	           "timer %d: a callback ran for an arm that was refused or whose cancel reported "
	           "TMO_CANCEL_PREVENTED",
	           a->timer);
	if (a->self_cancel) {
		int rc = tmo_cancel(fz.e, t);
		FUZZ_CHECK(rc == TMO_CANCEL_SELF, "timer %d: its callback's cancel returned %s",
		           a->timer, tmo_errname(rc));
	}
	linger(a);
	if (a->next >= 0) {
		struct arm *r = &fz.arms[a->next];
		int quiet = atomic_load(&fz.quiet);
		int64_t avail = quiet ? pool_avail(fz.e->tt_rec->cache_n) : 1;
		r->t_arm = tmo_now_ns();
		int rc = tmo_arm(fz.e, t, r->timeout, on_fire, r);
		int want = avail > 0 ? 0 : TMO_EAGAIN;
		FUZZ_CHECK(rc == want || (!quiet && fz.cap != 0 && rc == TMO_EAGAIN),
		           "timer %d: its callback's re-arm returned %s, model %s (%lld free nodes)",
		           a->timer, tmo_errname(rc), tmo_errname(want), (long long)avail);
		if (rc != 0)
			atomic_fetch_add(&fz.n_rearm_refused, 1);
		atomic_store(&a->rearm_rc, rc);
		linger(a); /* running and re-armed: a cancel waits, then prevents */
	}
	FUZZ_CHECK(atomic_fetch_add(&a->fired, 1) == 0, "timer %d: one arm fired twice", a->timer);
}

/* ---- threads -------------------------------------------------------------------------- */

static void do_call(struct call *c)
{
	if (c->op == CALL_ARM) {
		c->avail = pool_avail(lf_my_cache_count(fz.e));
		c->a->t_arm = tmo_now_ns();
		c->rc = tmo_arm(fz.e, &fz.t[c->idx], c->a->timeout, on_fire, c->a);
	} else {
		c->rc = tmo_cancel(fz.e, &fz.t[c->idx]);
	}
}

static void *helper_main(void *arg)
{
	struct helper *h = arg;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (!h->busy)
			pthread_cond_wait(&h->cv, &h->mu);
		if (h->c.op == CALL_EXIT)
			break;
		pthread_mutex_unlock(&h->mu);
		do_call(&h->c);
		pthread_mutex_lock(&h->mu);
		h->busy = 0;
		pthread_cond_broadcast(&h->cv);
	}
	h->busy = 0;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	return NULL; /* the library's exit hook detaches our record */
}

/* Runs c on helper h and waits for it.  Returns -1 when no thread could be
 * made (a shortage of threads: the caller runs it itself). */
static int helper_call(struct helper *h, struct call *c)
{
	if (!h->live) {
		if (c->op == CALL_EXIT)
			return 0;
		pthread_mutex_init(&h->mu, NULL);
		pthread_cond_init(&h->cv, NULL);
		h->busy = 0;
		if (pthread_create(&h->th, NULL, helper_main, h) != 0) {
			pthread_cond_destroy(&h->cv);
			pthread_mutex_destroy(&h->mu);
			return -1;
		}
		h->live = 1;
	}
	pthread_mutex_lock(&h->mu);
	h->c = *c;
	h->busy = 1;
	pthread_cond_broadcast(&h->cv);
	while (h->busy)
		pthread_cond_wait(&h->cv, &h->mu);
	*c = h->c;
	pthread_mutex_unlock(&h->mu);
	if (c->op == CALL_EXIT) {
		pthread_join(h->th, NULL);
		pthread_cond_destroy(&h->cv);
		pthread_mutex_destroy(&h->mu);
		h->live = 0;
	}
	return 0;
}

static void call_on(int thread, struct call *c)
{
	fz.n_helper += thread != 0;
	if (thread == 0 || helper_call(&fz.h[thread - 1], c) != 0)
		do_call(c);
}

static void helper_exit(int k)
{
	struct call c = {.op = CALL_EXIT};
	fz.n_exits += fz.h[k].live;
	helper_call(&fz.h[k], &c);
}

/* ---- model transitions ------------------------------------------------------------- */

static void check_arms(void);

static void decide(struct arm *a, int v)
{
	atomic_store(&a->expect, v);
	if (v == 0 && a->next >= 0)
		atomic_store(&fz.arms[a->next].expect, 0);
	if (v == 1)
		fz.fired++;
}

static void prevent(struct tmodel *m, struct arm *a)
{
	decide(a, 0);
	m->st = T_IDLE;
	m->out = LF_CANCELLED_OUT;
	m->uncertain = 0;
	fz.prevented++;
	fz.prevents_since_settle++;
	if (a->due) {
		int64_t until = tmo_now_ns() + a->timeout + 2 * fz.res + 200 * US;
		if (until > fz.transit_until)
			fz.transit_until = until;
	}
}

static void set_fired(struct tmodel *m, struct arm *a)
{
	m->st = T_FIRED;
	m->out = LF_FIRED;
	m->cur = (int)(a - fz.arms);
	m->uncertain = 0;
}

/* Timer i's current arm has fired and its callback returned: follow its
 * re-arm.  A due re-arm that has not fired yet leaves the timer armed due. */
static void resolve_fired(int i)
{
	struct tmodel *m = &fz.m[i];
	struct arm *a = &fz.arms[m->cur];
	FUZZ_CHECK(atomic_load(&a->fired) == 1, "timer %d: fired %d times, model once", i,
	           atomic_load(&a->fired));
	decide(a, 1);
	if (a->next < 0) {
		set_fired(m, a);
		return;
	}
	struct arm *r = &fz.arms[a->next];
	int rc = atomic_load(&a->rearm_rc);
	if (rc != 0) { /* TMO_EAGAIN: the callback checked the rule */
		decide(r, 0);
		set_fired(m, a);
		return;
	}
	m->cur = a->next;
	m->uncertain = 0;
	m->st = r->due ? T_DUE : T_LONG;
	if (r->due && atomic_load(&r->fired) == 1) {
		decide(r, 1);
		set_fired(m, r);
	}
}

/* A cancel of a due timer that may have fired meanwhile returned rc: the
 * callback counters say what happened (cancel returns only after a running
 * callback has returned). */
static void cancel_raced(int i, int rc)
{
	struct tmodel *m = &fz.m[i];
	struct arm *a = &fz.arms[m->cur];
	fz.n_raced++;
	fz.n_waited += rc == TMO_CANCEL_WAITED;
	if (atomic_load(&a->fired) == 0) {
		FUZZ_CHECK(rc == TMO_CANCEL_PREVENTED,
		           "timer %d: cancel returned %s, but its callback has not run", i,
		           tmo_errname(rc));
		prevent(m, a);
		return;
	}
	resolve_fired(i);
	if (m->st == T_FIRED) {
		FUZZ_CHECK(rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED,
		           "timer %d: its callback ran, cancel returned %s", i, tmo_errname(rc));
		return;
	}
	/* it fired and re-armed: the cancel prevented the re-arm */
	FUZZ_CHECK(rc == TMO_CANCEL_PREVENTED,
	           "timer %d: fired and re-armed, cancel returned %s (the re-arm %s)", i,
	           tmo_errname(rc), state_name[m->st]);
	prevent(m, &fz.arms[m->cur]);
}

static void run_start(void)
{
	if (fz.running)
		return;
	for (int i = 0; i <= TIMERS; i++)
		fz.m[i].uncertain = fz.m[i].st == T_DUE;
	fz.running = 1;
	FUZZ_CHECK(tmo_park(fz.e, 0) == 0, "unpark failed");
}

/* Park; every due timer that fired meanwhile is resolved by its counter. */
static void run_stop(void)
{
	if (!fz.running)
		return;
	FUZZ_CHECK(tmo_park(fz.e, 1) == 0, "park failed");
	fz.running = 0;
	for (int i = 0; i <= TIMERS; i++) {
		struct tmodel *m = &fz.m[i];
		if (!m->uncertain)
			continue;
		m->uncertain = 0;
		if (atomic_load(&fz.arms[m->cur].fired) != 0)
			resolve_fired(i);
	}
	check_arms();
}

static uint64_t tick_now(void) { return atomic_load(&fz.e->tickw) >> LF_TW_SHIFT; }

static int due_done(void)
{
	for (int i = 0; i <= TIMERS; i++) {
		struct tmodel *m = &fz.m[i];
		if (m->st != T_DUE)
			continue;
		struct arm *a = &fz.arms[m->cur];
		if (atomic_load(&a->fired) == 0)
			return 0;
		if (a->next >= 0 && fz.arms[a->next].due && atomic_load(&a->rearm_rc) == 0 &&
		    atomic_load(&fz.arms[a->next].fired) == 0)
			return 0;
	}
	return 1;
}

static void wait_until(int (*cond)(void), const char *what)
{
	int64_t limit = tmo_now_ns() + LIVENESS_NS;
	while (!cond())
		FUZZ_CHECK(tmo_now_ns() < limit, "settle: %s after %lld s", what,
		           (long long)(LIVENESS_NS / TMO_NSEC_PER_SEC));
}

static uint64_t tick_goal;
static int tick_reached(void)
{
	uint64_t tw = atomic_load(&fz.e->tickw);
	if (tw >> LF_TW_SHIFT >= tick_goal)
		return 1;
	/* asleep until a far deadline: a spurious wake-up costs one round */
	if (tw & LF_TW_SLEEPING)
		lf_ec_wake(&fz.e->wake_ec);
	nap();
	return 0;
}
static int due_done_nap(void)
{
	if (due_done() && tmo_now_ns() >= fz.transit_until)
		return 1;
	nap();
	return 0;
}

/* Run the timer thread until every due timer (and a due re-arm) has fired
 * and one full round has looked at everything, then park it again. */
static void settle(void)
{
	run_stop();
	atomic_store(&fz.quiet, 1);
	FUZZ_CHECK(tmo_park(fz.e, 0) == 0, "unpark failed");
	wait_until(due_done_nap, "due timers have not fired");
	/* a round starts with a tick and ends with one (or the next round's):
	 * two ticks on, a round ran wholly after the last due timer fired */
	tick_goal = tick_now() + 2;
	wait_until(tick_reached, "the timer thread made no round");
	FUZZ_CHECK(tmo_park(fz.e, 1) == 0, "park failed");
	atomic_store(&fz.quiet, 0);
	for (int i = 0; i <= TIMERS; i++)
		if (fz.m[i].st == T_DUE)
			resolve_fired(i);
	for (int i = 0; i <= TIMERS; i++)
		FUZZ_CHECK(fz.m[i].st != T_DUE, "timer %d: still due after a settle", i);
	check_arms();
	fz.prevents_since_settle = 0;
	fz.transit_until = 0;
}

/* ---- ops --------------------------------------------------------------------------- */

static struct arm *arm_new(int idx, int64_t timeout, int due)
{
	if (fz.n_arms >= fz.arm_limit)
		return NULL;
	struct arm *a = &fz.arms[fz.n_arms++];
	a->timer = idx;
	a->due = due;
	a->timeout = timeout;
	a->self_cancel = 0;
	a->slow = 0;
	a->next = -1;
	a->t_arm = 0;
	atomic_init(&a->expect, -1);
	atomic_init(&a->fired, 0);
	atomic_init(&a->rearm_rc, RC_UNSET);
	return a;
}

/* Decode an arm: spec bits 0-2 the timeout, 3-4 the callback's re-arm,
 * 5 the callback's cancel of its own timer, 6 a slow callback (T0's arms:
 * a helper's spec has 6 bits). */
static struct arm *arm_decode(int idx, unsigned spec, struct fuzz_in *in)
{
	int64_t timeout = 0;
	int due = 1;
	switch (spec & 7) {
	case 0:
	case 5:
		break;
	case 1:
	case 6:
		timeout = ((int64_t)fuzz_u8(in) + 1) * 8 * US;
		break;
	case 2:
	case 7:
		timeout = INT64_C(1) << (42 + fuzz_u8(in) % 20);
		due = 0;
		break;
	case 3:
		timeout = TMO_TIMEOUT_MAX;
		due = 0;
		break;
	default: /* refused before the engine sees it */
		timeout = spec & 8 ? -1 : TMO_TIMEOUT_MAX + 1;
		due = 0;
		break;
	}
	struct arm *a = arm_new(idx, timeout, due);
	if (a == NULL)
		return NULL;
	a->self_cancel = (spec >> 5) & 1;
	a->slow = (spec >> 6) & 1;
	unsigned re = (spec >> 3) & 3;
	if (re == 1 || re == 2) {
		struct arm *r = arm_new(idx, re == 1 ? LONG_NS : 0, re == 2);
		if (r == NULL)
			return NULL;
		a->next = (int)(r - fz.arms);
	}
	return a;
}

static void op_cancel(int thread, int idx)
{
	struct tmodel *m = &fz.m[idx];
	struct call c = {.op = CALL_CANCEL, .idx = idx};
	call_on(thread, &c);
	if (m->uncertain) {
		cancel_raced(idx, c.rc);
		return;
	}
	int want = m->st == T_IDLE ? TMO_ENOTARMED
	           : m->st == T_FIRED ? TMO_CANCEL_FIRED
	                              : TMO_CANCEL_PREVENTED;
	FUZZ_CHECK(c.rc == want, "cancel of timer %d (%s) on T%d returned %s, model %s", idx,
	           state_name[m->st], thread, tmo_errname(c.rc), tmo_errname(want));
	if (want == TMO_CANCEL_PREVENTED)
		prevent(m, &fz.arms[m->cur]);
}

/* Returns 0 when the arm records ran out (the program ends there). */
static int op_arm(int thread, int idx, struct arm *a)
{
	if (a == NULL)
		return 0;
	struct tmodel *m = &fz.m[idx];
	if (m->uncertain) { /* its fire races with this: an arm would be ambiguous */
		decide(a, 0);
		op_cancel(thread, idx);
		return 1;
	}
	struct call c = {.op = CALL_ARM, .idx = idx, .a = a};
	call_on(thread, &c);
	int want;
	if (a->timeout < 0 || a->timeout > TMO_TIMEOUT_MAX)
		want = TMO_EBADTIMEOUT;
	else if (is_pending(m))
		want = TMO_EARMED;
	else if (fz.running)
		want = fz.cap != 0 && c.rc == TMO_EAGAIN ? TMO_EAGAIN : 0;
	else
		want = c.avail > 0 ? 0 : TMO_EAGAIN;
	FUZZ_CHECK(c.rc == want,
	           "arm of timer %d (%s) on T%d returned %s, model %s (%lld free nodes for it)", idx,
	           state_name[m->st], thread, tmo_errname(c.rc), tmo_errname(want),
	           (long long)c.avail);
	if (c.rc != 0) {
		fz.n_eagain += c.rc == TMO_EAGAIN;
		decide(a, 0);
		return 1;
	}
	m->st = a->due ? T_DUE : T_LONG;
	m->cur = (int)(a - fz.arms);
	m->uncertain = fz.running && a->due;
	return 1;
}

/* T0 arms and cancels one timer LF_RING_SLOTS times: its next arms pass
 * over every slot of its ring, and take back a node another thread's
 * cancel left in one.  Returns 1 if every arm got a node, 0 if not, -1
 * when the arm records ran out. */
static int ring_pass(void)
{
	int ok = 1;
	for (int k = 0; k < LF_RING_SLOTS; k++) {
		struct arm *a = arm_new(SCRATCH, LONG_NS, 0);
		if (!op_arm(0, SCRATCH, a))
			return -1;
		ok &= fz.m[SCRATCH].st == T_LONG;
		op_cancel(0, SCRATCH);
	}
	return ok;
}

/* ---- checks after each op ---------------------------------------------------------------- */

static void check_stats(void)
{
	struct tmo_stats st;
	FUZZ_CHECK(tmo_stats(fz.e, &st) == 0, "stats failed");
	uint64_t pending = 0, racing = 0;
	for (int i = 0; i <= TIMERS; i++) {
		racing += fz.m[i].uncertain;
		pending += is_pending(&fz.m[i]) && !fz.m[i].uncertain;
	}
	FUZZ_CHECK(st.cancelled == fz.prevented, "stats: %llu cancelled, model %llu",
	           (unsigned long long)st.cancelled, (unsigned long long)fz.prevented);
	/* A racing timer's share is 0 or 1.  The counters are summed one by one
	 * while callbacks fire and re-arm (the fire counter last): a callback
	 * that fires, re-arms due and fires again between those reads counts
	 * two fires and hides its re-arm, one below its share. */
	FUZZ_CHECK(st.pending + racing >= pending && st.pending <= pending + racing,
	           "stats: %llu pending, model %llu (racing: %llu either way)",
	           (unsigned long long)st.pending, (unsigned long long)pending,
	           (unsigned long long)racing);
	FUZZ_CHECK(racing ? st.fired >= fz.fired : st.fired == fz.fired,
	           "stats: %llu fired, model %llu", (unsigned long long)st.fired,
	           (unsigned long long)fz.fired);
}

/* Every arm's callback count against the model (callbacks done: parked). */
static void check_arms(void)
{
	for (int k = 0; k < fz.n_arms; k++) {
		struct arm *a = &fz.arms[k];
		int f = atomic_load(&a->fired), x = atomic_load(&a->expect);
		FUZZ_CHECK(f == (x == 1), "timer %d: an arm fired %d times, model %s", a->timer, f,
		           x == 1 ? "once" : x == 0 ? "never (prevented or refused)" : "not yet");
	}
}

static void check_parked(void)
{
	check_stats();
	audit(0);
}

/* ---- the program -------------------------------------------------------------------------- */

static const int64_t resolutions[4] = {0, 100 * US, 250 * US, 37 * US};
static const uint64_t caps[4] = {0, 64, 128, 256};

enum { END_DRAIN, END_DRAIN2, END_PARKED, END_RUNNING };

static void finish(int how)
{
	fz.arm_limit = MAX_ARMS;
	if (how == END_DRAIN || how == END_DRAIN2) {
		settle();
		for (int i = 0; i < TIMERS; i++)
			if (is_pending(&fz.m[i]))
				op_cancel(0, i);
		for (int k = 0; k < HELPERS; k++)
			helper_exit(k);
		int passed = ring_pass();
		settle();
		check_stats();
		audit(passed == 1);
	} else if (how == END_PARKED) {
		run_stop();
		check_parked();
	} else {
		run_start();
	}
	/* destroy: callbacks may still use fz.e while it runs */
	struct tmo *e = fz.e;
	FUZZ_CHECK(tmo_destroy(&e) == 0, "destroy failed");
	for (int k = 0; k < fz.n_arms; k++) {
		struct arm *a = &fz.arms[k];
		int f = atomic_load(&a->fired), x = atomic_load(&a->expect);
		if (how == END_RUNNING)
			FUZZ_CHECK(f == (x == 1) || (x == -1 && a->due && f == 1),
			           "timer %d: an arm fired %d times by the end of destroy, model %s",
			           a->timer, f, x == 1 ? "once" : x == 0 ? "never" : "at most once");
		else
			FUZZ_CHECK(f == (x == 1), "timer %d: an arm fired %d times across destroy",
			           a->timer, f);
	}
	if (how == END_PARKED)
		for (int i = 0; i < TIMERS; i++)
			if (is_pending(&fz.m[i]))
				FUZZ_CHECK(lf_word_out(atomic_load(lf_timer_word(&fz.t[i]))) ==
				               LF_CANCELLED_OUT,
				           "timer %d: pending at destroy, its word does not say cancelled", i);
	for (int k = 0; k < HELPERS; k++)
		helper_exit(k); /* after destroy: their exit hooks find no engine */
	fz.e = NULL;
}

/* The encoding (tests/fuzz/corpus/make_seeds.py writes it):
 *   header  bit 0 wheel (else mpsc), bits 1-2 resolution, 3-4 node cap,
 *           5-6 the end (drain twice as often as destroy parked / running);
 *   op      bits 0-5 the timer, bits 6-7: 0 arm on T0 (a spec byte follows),
 *           1 cancel on T0, 2 on a helper (a byte: bit 0 which, bit 1
 *           cancel, else bits 2-7 the spec), 3 control (bits 0-2: settle,
 *           run, park, T1 exits, T2 exits, T0's ring pass, checks only);
 *   spec    see arm_decode (short and pow2 timeouts take one more byte). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = {data, size, 0};
	uint8_t cfg = fuzz_u8(&in);
	memset(&fz, 0, sizeof fz);
	fz.arm_limit = MAX_ARMS - 2 * LF_RING_SLOTS;
	fz.wheel = cfg & 1;
	fz.cap = caps[(cfg >> 3) & 3];
	int end = (cfg >> 5) & 3;
	struct tmo_config conf = {.resolution_ns = resolutions[(cfg >> 1) & 3]};
	const struct tmo_engine_ops *ops = tmo_engine_find(fz.wheel ? "wheel" : "mpsc");
	FUZZ_CHECK(ops != NULL, "no %s engine", fz.wheel ? "wheel" : "mpsc");
	fz.res = conf.resolution_ns ? conf.resolution_ns : ops->resolution_ns;

	int64_t allocs = tmo_testing_live_allocs();
	tmo_testing_set_node_cap(fz.cap);
	int rc = tmo_create_ops(ops, &conf, &fz.e);
	tmo_testing_set_node_cap(0);
	if (rc == TMO_EAGAIN) { /* no thread to be had: the machine's shortage, not a finding */
		fprintf(stderr, "fuzz_lf: create: %s, input skipped\n", tmo_errname(rc));
		return 0;
	}
	FUZZ_CHECK(rc == 0, "create failed: %s", tmo_errname(rc));
	FUZZ_CHECK(tmo_park(fz.e, 1) == 0, "park failed");

	for (int ops_n = 0; fuzz_more(&in) && ops_n < MAX_OPS; ops_n++) {
		uint8_t op = fuzz_u8(&in);
		int idx = op & 63; /* low bits: which timer; high bits: what */
		int go = 1;
		switch (op >> 6) {
		case 0:
			go = op_arm(0, idx, arm_decode(idx, fuzz_u8(&in), &in));
			break;
		case 1:
			op_cancel(0, idx);
			break;
		case 2: {
			uint8_t s = fuzz_u8(&in);
			int thread = 1 + (s & 1);
			if (s & 2)
				op_cancel(thread, idx);
			else
				go = op_arm(thread, idx, arm_decode(idx, s >> 2, &in));
			break;
		}
		default:
			switch (idx & 7) {
			case 0:
				if (fz.settles < MAX_SETTLES) {
					fz.settles++;
					settle();
				}
				break;
			case 1:
				run_start();
				break;
			case 2:
				run_stop();
				break;
			case 3:
			case 4:
				helper_exit((idx & 7) - 3);
				break;
			case 5:
				go = ring_pass() >= 0;
				break;
			default:
				break; /* checks only */
			}
		}
		if (!go)
			break;
		if (fz.running)
			check_stats();
		else
			check_parked();
	}
	if (getenv("FUZZ_LF_TRACE") != NULL) {
		struct lf_debug d;
		lf_debug(fz.e, &d);
		fprintf(stderr, "fuzz_lf: stolen %llu, spilled %llu, via inbox %llu, pages given back %llu\n",
		        (unsigned long long)d.stolen, (unsigned long long)d.spilled,
		        (unsigned long long)d.inbox, (unsigned long long)d.trims);
		fprintf(stderr, "fuzz_lf: %s res %lld cap %llu end %d: %zu bytes, %d arm records, "
		        "%llu fired, %llu prevented, %d settles%s; %d refused (TMO_EAGAIN; %d re-arms), %d "
		        "helper calls, %d helper exits, %d cancels raced a fire (%d waited)\n",
		        fz.wheel ? "wheel" : "mpsc", (long long)fz.res, (unsigned long long)fz.cap, end,
		        in.pos, fz.n_arms, (unsigned long long)fz.fired,
		        (unsigned long long)fz.prevented, fz.settles, fz.running ? ", running" : "",
		        fz.n_eagain, atomic_load(&fz.n_rearm_refused), fz.n_helper, fz.n_exits, fz.n_raced,
		        fz.n_waited);
	}
	finish(end);
	FUZZ_CHECK(tmo_testing_live_allocs() == allocs,
	           "library allocations: %lld live after destroy, %lld before create",
	           (long long)tmo_testing_live_allocs(), (long long)allocs);
	return 0;
}
