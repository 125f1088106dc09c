/*
 * example: an engine built outside tmo, against its installed headers only
 * (docs/writing-an-engine.md).  One timer thread, one mutex, a condition
 * variable on CLOCK_MONOTONIC and a list of the pending timers sorted by
 * deadline, linked through the caller's timers (arm is O(n): short, not
 * fast).
 *
 *   cc -O2 -shared -fPIC example.c $(pkg-config --cflags tmo) -o example.so
 *   ./harness --impl=./example.so --scenario=race --quick
 *   scripts/conform ./example.so
 *
 * The contract, and how this file keeps it:
 *  - exactly once: a timer's state changes only under the mutex: IDLE ->
 *    PENDING (arm), PENDING -> IDLE (cancel: PREVENTED), PENDING -> FIRED
 *    (the timer thread, just before the callback);
 *  - never early: the thread runs a timer once the clock reads its
 *    deadline (arm's clock reading + timeout);
 *  - cancel waits for a running callback: the thread names the timer whose
 *    callback runs (`running`, compared, never dereferenced) and counts
 *    the callbacks that returned (`gen`); a cancel of the running timer from
 *    another thread waits until `gen` moves, and the thread fires nothing
 *    more until every such waiter has looked (`waiters`), so the waiter
 *    sees the state the callback left (a re-arm is the one it cancels);
 *    from inside the callback it returns TMO_CANCEL_SELF at once; a wait
 *    that would close a cycle of callbacks cancelling each other's timers
 *    (across engines) is refused with TMO_EDEADLK by the host's check
 *    (tmo_engine_wait_begin, around the callback tmo_engine_cb_begin/end);
 *  - destroy: marks every pending timer idle, joins the thread (which
 *    finishes a running callback), then cancels what that callback armed.
 *
 * Caps: TMO_CAP_NO_ALLOC (arm and cancel only link the caller's timer).
 * Memory and the thread come from the host (tmo_engine_calloc,
 * tmo_engine_thread_create), so the suite's fault injection reaches them.
 * At most MAX_PENDING timers pending: arm is O(n).
 *
 * -DEXAMPLE_BROKEN=1 builds "example-early", which fires at half the
 * timeout; -DEXAMPLE_BROKEN=2 "example-nowait", whose cancel returns
 * TMO_CANCEL_FIRED at once while the callback still runs.  scripts/conform
 * must fail both (tests/examples/examples.cmake checks the cases' names).
 * -DEXAMPLE_BROKEN=3 builds "example-skewed", which runs a timer 2 ms late
 * and, every other time, the next one first if it is due (silently: the
 * expiry scenario must fail it); -DEXAMPLE_BROKEN=4 "example-skewed-named"
 * does the same and counts each such timer in tmo_stats' `skewed` (guarantee
 * 4's named limit, tmo.h: the scenario must report it as that limit).
 */
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include <tmo/engine.h>
#include <tmo/tmo.h>

#ifndef EXAMPLE_BROKEN
#define EXAMPLE_BROKEN 0
#endif
#if EXAMPLE_BROKEN == 1
#define EXAMPLE_NAME "example-early"
#elif EXAMPLE_BROKEN == 2
#define EXAMPLE_NAME "example-nowait"
#elif EXAMPLE_BROKEN == 3
#define EXAMPLE_NAME "example-skewed"
#elif EXAMPLE_BROKEN == 4
#define EXAMPLE_NAME "example-skewed-named"
#else
#define EXAMPLE_NAME "example"
#endif

enum { IDLE = 0, PENDING, FIRED };

#define RESOLUTION (50 * TMO_NSEC_PER_USEC)
/* How late the skewed variants run a timer (0: on time). */
#define SKEW (EXAMPLE_BROKEN >= 3 ? 2 * TMO_NSEC_PER_MSEC : 0)

/* Arm walks the list: past this many pending timers it answers TMO_EAGAIN
 * (a bounded resource, tmo.h) rather than take O(n^2) to fill. */
#define MAX_PENDING 20000

/* What the engine keeps in the caller's timer (its private words). */
struct priv {
	struct tmo_timer *next; /* the sorted list */
	int64_t deadline;
	uint32_t state;
};
_Static_assert(sizeof(struct priv) <= sizeof(((struct tmo_timer *)0)->tmo_private),
               "struct priv must fit in a timer's private words");

struct tmo {
	struct tmo_base base; /* first; the core writes it */
	pthread_mutex_t m;
	pthread_cond_t wake;    /* the timer thread sleeps here */
	pthread_cond_t done;    /* a callback returned; a waiter looked */
	pthread_t thread;
	pid_t pid;              /* a callback that forks returns in another */
	struct tmo_timer *head; /* pending timers, earliest first */
	struct tmo_timer *running;
	uint64_t running_ref; /* its invocation, for the deadlock check */
	uint64_t gen, waiters, pending, fired, cancelled;
	uint64_t skewed;     /* example-skewed-named's count (tmo_stats) */
	int64_t fired_max;   /* the latest deadline run */
	bool swap;           /* the skewed variants' toggle */
	bool stop;
};

static struct priv *priv(struct tmo_timer *t) { return (struct priv *)(void *)t->tmo_private; }

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * TMO_NSEC_PER_SEC + ts.tv_nsec;
}

/* Where the timer to run next is linked: the head; in the skewed variants,
 * every other time, the second when it is due too. */
static struct tmo_timer **next_due(struct tmo *e)
{
	struct tmo_timer **at = &e->head, *second = priv(e->head)->next;
	if (SKEW > 0 && (e->swap ^= 1) && second != NULL && priv(second)->deadline <= now_ns())
		at = &priv(e->head)->next;
	return at;
}

/* Run the next timer's callback (it is due), m held on entry and exit. */
static void fire_head(struct tmo *e)
{
	struct tmo_timer **at = next_due(e);
	struct tmo_timer *t = *at;
	*at = priv(t)->next;
	if (EXAMPLE_BROKEN == 4 && priv(t)->deadline < e->fired_max - RESOLUTION)
		e->skewed++;
	if (priv(t)->deadline > e->fired_max)
		e->fired_max = priv(t)->deadline;
	priv(t)->state = FIRED;
	e->pending--;
	e->fired++;
	e->running = t;
	e->running_ref = tmo_engine_cb_begin();
	tmo_callback *cb = t->cb;
	void *arg = t->arg;
	pthread_mutex_unlock(&e->m);
	cb(t, arg);
	tmo_engine_cb_end();
	if (getpid() != e->pid)
		pthread_exit(NULL); /* the child of a fork: its only thread ends */
	pthread_mutex_lock(&e->m);
	e->running = NULL;
	e->gen++;
	pthread_cond_broadcast(&e->done);
	while (e->waiters > 0)
		pthread_cond_wait(&e->done, &e->m);
}

static void *timer_thread(void *arg)
{
	struct tmo *e = arg;
	tmo_engine_thread_enter(e, EXAMPLE_NAME);
	pthread_mutex_lock(&e->m);
	while (!e->stop) {
		if (e->head == NULL) {
			pthread_cond_wait(&e->wake, &e->m);
		} else if (priv(e->head)->deadline + SKEW > now_ns()) {
			int64_t d = priv(e->head)->deadline + SKEW;
			struct timespec ts = {d / TMO_NSEC_PER_SEC, d % TMO_NSEC_PER_SEC};
			pthread_cond_timedwait(&e->wake, &e->m, &ts);
		} else {
			fire_head(e);
		}
	}
	pthread_mutex_unlock(&e->m);
	return NULL;
}

static int ex_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* deadlines are exact: no resolution to set */
	struct tmo *e = tmo_engine_calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&e->m, NULL);
	pthread_cond_init(&e->wake, &ca);
	pthread_cond_init(&e->done, NULL);
	pthread_condattr_destroy(&ca);
	e->pid = getpid();
	/* The default stack (8 MiB) is above TMO_CALLBACK_STACK_MIN. */
	int rc = tmo_engine_thread_create(&e->thread, NULL, timer_thread, e);
	if (rc != 0) {
		pthread_cond_destroy(&e->done);
		pthread_cond_destroy(&e->wake);
		pthread_mutex_destroy(&e->m);
		tmo_engine_free(e);
		return rc;
	}
	*out = e;
	return 0;
}

/* Every pending timer becomes idle: its arm is cancelled. */
static void drain(struct tmo *e)
{
	for (struct tmo_timer *t = e->head; t != NULL; t = priv(t)->next) {
		priv(t)->state = IDLE;
		e->cancelled++;
	}
	e->head = NULL;
	e->pending = 0;
}

static void ex_destroy(struct tmo *e)
{
	pthread_mutex_lock(&e->m);
	e->stop = true;
	drain(e);
	pthread_cond_signal(&e->wake);
	pthread_mutex_unlock(&e->m);
	pthread_join(e->thread, NULL);
	drain(e); /* what a running callback armed meanwhile */
	pthread_cond_destroy(&e->done);
	pthread_cond_destroy(&e->wake);
	pthread_mutex_destroy(&e->m);
	tmo_engine_free(e);
}

/* In a child after fork(): the mutex and condition variables may be the
 * parent's thread's to wait on; only the memory is the child's. */
static void ex_destroy_forked(struct tmo *e) { tmo_engine_free(e); }

static int ex_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                  void *arg)
{
	int64_t deadline = now_ns() + (EXAMPLE_BROKEN == 1 ? timeout_ns / 2 : timeout_ns);
	pthread_mutex_lock(&e->m);
	if (priv(t)->state == PENDING || e->pending >= MAX_PENDING) {
		pthread_mutex_unlock(&e->m);
		return priv(t)->state == PENDING ? TMO_EARMED : TMO_EAGAIN;
	}
	t->cb = cb;
	t->arg = arg;
	priv(t)->deadline = deadline;
	priv(t)->state = PENDING;
	struct tmo_timer **at = &e->head; /* after every earlier-or-equal deadline */
	while (*at != NULL && priv(*at)->deadline <= deadline)
		at = &priv(*at)->next;
	priv(t)->next = *at;
	*at = t;
	e->pending++;
	if (e->head == t)
		pthread_cond_signal(&e->wake); /* the thread may sleep past it */
	pthread_mutex_unlock(&e->m);
	return 0;
}

static void unlink_timer(struct tmo *e, struct tmo_timer *t)
{
	struct tmo_timer **at = &e->head;
	while (*at != t)
		at = &priv(*at)->next;
	*at = priv(t)->next;
	e->pending--;
}

static int ex_cancel(struct tmo *e, struct tmo_timer *t)
{
	pthread_mutex_lock(&e->m);
	bool waited = false;
	bool own_thread = pthread_equal(pthread_self(), e->thread);
	if (e->running == t && !own_thread && EXAMPLE_BROKEN != 2) {
		/* a callback of another engine, waited for by that callback */
		if (tmo_engine_wait_begin(e->running_ref) != 0) {
			pthread_mutex_unlock(&e->m);
			return TMO_EDEADLK;
		}
		uint64_t gen = e->gen;
		e->waiters++;
		while (e->gen == gen)
			pthread_cond_wait(&e->done, &e->m);
		e->waiters--;
		pthread_cond_broadcast(&e->done); /* the timer thread waits for the last */
		tmo_engine_wait_end();
		waited = true;
	}
	int res;
	if (priv(t)->state == PENDING) { /* the arm, or the callback's re-arm */
		unlink_timer(e, t);
		priv(t)->state = IDLE;
		e->cancelled++;
		res = TMO_CANCEL_PREVENTED;
	} else if (waited) {
		res = TMO_CANCEL_WAITED;
	} else if (priv(t)->state == IDLE) {
		res = TMO_ENOTARMED; /* never armed, or another cancel prevented it */
	} else {
		res = e->running == t && own_thread ? TMO_CANCEL_SELF : TMO_CANCEL_FIRED;
	}
	pthread_mutex_unlock(&e->m);
	return res;
}

static int ex_stats(struct tmo *e, struct tmo_stats *out)
{
	pthread_mutex_lock(&e->m);
	out->pending = e->pending;
	out->held_nodes = e->pending; /* the nodes are the callers' timers */
	out->held_bytes = 0;
	out->threads = 1;
	out->fired = e->fired;
	out->cancelled = e->cancelled;
	out->skewed = e->skewed;
	pthread_mutex_unlock(&e->m);
	return 0;
}

static const struct tmo_engine_ops example_ops = {
	.name = EXAMPLE_NAME,
	.summary = "out-of-tree example: one timer thread, mutex + condvar, sorted list",
	.caps = TMO_CAP_NO_ALLOC,
	.resolution_ns = RESOLUTION,
	.create = ex_create,
	.destroy = ex_destroy,
	.arm = ex_arm,
	.cancel = ex_cancel,
	.stats = ex_stats,
	.destroy_forked = ex_destroy_forked,
};
TMO_ENGINE_EXPORT(example_ops);
