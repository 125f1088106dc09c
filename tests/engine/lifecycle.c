/*
 * Lifecycle and misuse (CONTRACT.md "Lifecycle and misuse"), on one engine:
 * `test_engine_lifecycle ENGINE [CASE]` (main's start and the skip on a
 * shortage: lifecycle.h; each case's watchdog: cases.h; fork:
 * lifecycle_fork.c).  One case
 * per item:
 *
 *  destroy         destroy cancels every timer whose callback has not
 *                  started (due ones included, and arms made by the running
 *                  callback while destroy waits), waits for the running one
 *                  and runs nothing after it returns.  Synchronised on
 *                  state: the running callback blocks on a gate that a
 *                  helper opens once the destroying thread is seen blocked
 *                  inside tmo_destroy.
 *  callback_misuse tmo_destroy and tmo_testing_park on the engine from its own
 *                  callback answer TMO_EDEADLK, the handle is untouched and
 *                  the engine keeps working; destroying ANOTHER engine from
 *                  the callback is allowed (the refusal is specific).
 *  park_rounds     (engines with a park hook) park(1) straight after park(0),
 *                  round after round, while a timer due at once keeps the
 *                  engine thread moving through its loop: the thread may
 *                  reach a park point, and hold there what it holds,
 *                  between the park op's recording of the request and its
 *                  wake-up.  That wake-up must not then wait for what the
 *                  parked thread holds; a deadlock fails the case by its
 *                  watchdog.
 *  stale_identity  a timer left pending (or fired) on a destroyed engine,
 *                  then cancelled or armed through a new engine (of this
 *                  kind, or this kind after any other kind), answers
 *                  TMO_EWRONGENGINE: never a crash, never FIRED.  The new
 *                  engine is created until malloc hands it the old one's
 *                  address (reported: ASan's quarantine never does).
 *
 * (Two engines whose callbacks cancel each other's timers: the cancel that
 * would close the cycle is refused, tests/engine/deadlock.c.)
 */
#include <pthread.h>

#include "lifecycle.h"

static const char *arm_name(int rc) { return rc == 0 ? "TMO_OK" : tmo_errname(rc); }

/* ---- destroy cancels what has not started --------------------------------------- */

static struct {
	struct tmo *eng; /* the engine under destroy (the caller's handle is NULL) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int hold_open, gate_open;
	atomic_int hold_started;
	atomic_int started, in_flight, after_return;
	atomic_int first_done;
	struct tmo_timer extra;
	int rc_extra, rc_rearm;
	atomic_int destroy_called;
	atomic_int destroyer_tid;
	int destroyer_seen_blocked;
} ds = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void ds_wait(int *flag)
{
	pthread_mutex_lock(&ds.mu);
	while (!*flag)
		pthread_cond_wait(&ds.cv, &ds.mu);
	pthread_mutex_unlock(&ds.mu);
}

static void ds_open(int *flag)
{
	pthread_mutex_lock(&ds.mu);
	*flag = 1;
	pthread_cond_broadcast(&ds.cv);
	pthread_mutex_unlock(&ds.mu);
}

/* Holds the engine's callback thread while the due timers are armed, so
 * they all fall due before the engine looks again (one batch). */
static void ds_hold_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_store(&ds.hold_started, 1);
	ds_wait(&ds.hold_open);
}

static void ds_plain_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_fetch_add(&ds.started, 1);
	if (atomic_load(&ds.after_return))
		atomic_store(&ds.after_return, 2);
}

static void ds_cb(struct tmo_timer *t, void *arg)
{
	(void)arg;
	int first = atomic_fetch_add(&ds.started, 1) == 0;
	atomic_fetch_add(&ds.in_flight, 1);
	if (atomic_load(&ds.after_return))
		atomic_store(&ds.after_return, 2);
	ds_wait(&ds.gate_open);
	if (first && atomic_load(&ds.destroy_called)) {
		/* Arms made while destroy waits for this callback: they have not
		 * started, so destroy cancels them too. */
		ds.rc_extra = tmo_arm(ds.eng, &ds.extra, 0, ds_plain_cb, NULL);
		ds.rc_rearm = tmo_arm(ds.eng, t, 0, ds_plain_cb, NULL);
		atomic_store(&ds.first_done, 1);
	}
	atomic_fetch_sub(&ds.in_flight, 1);
}

/* Opens the gate once the destroying thread has been seen blocked inside
 * tmo_destroy (three looks in a row, a millisecond apart): by then destroy
 * has got as far as waiting, for the running callback or for a thread the
 * callback holds up. */
static void *ds_opener(void *arg)
{
	(void)arg;
	ET_WAIT_UNTIL(atomic_load(&ds.destroy_called), LIVENESS);
	ds.destroyer_seen_blocked =
		et_wait_blocked((pid_t)atomic_load(&ds.destroyer_tid), 3, LIVENESS);
	ds_open(&ds.gate_open);
	return NULL;
}

static int ds_wait_started(int want)
{
	ET_WAIT_UNTIL(atomic_load(&ds.started) >= want, LIVENESS);
	return atomic_load(&ds.started);
}

static void test_destroy(void)
{
	enum { DUE = 32, FAR = 8 };
	static struct tmo_timer hold, due[DUE], far[FAR];
	tmo_timer_init(&hold);
	memset(due, 0, sizeof due);
	memset(far, 0, sizeof far);
	tmo_timer_init(&ds.extra);
	ds.hold_open = ds.gate_open = 0;
	atomic_store(&ds.hold_started, 0);
	atomic_store(&ds.started, 0);
	atomic_store(&ds.in_flight, 0);
	atomic_store(&ds.after_return, 0);
	atomic_store(&ds.first_done, 0);
	atomic_store(&ds.destroy_called, 0);
	ds.rc_extra = ds.rc_rearm = -100;
	CHECK_EQ(et_warm_up(), 0);
	int threads0 = et_thread_count();
	int64_t live0 = tmo_testing_live_allocs();
	struct tmo *e = new_engine();
	if (e == NULL)
		return;
	ds.eng = e;
	int concurrent = (et_ops->caps & TMO_CAP_CONCURRENT_CALLBACKS) != 0;

	/* All DUE timers fall due while `hold` keeps the callback thread, so
	 * the engine finds them due together (libevent: one batch of active
	 * events).  The first of them to run blocks on the gate; an engine with
	 * one callback thread cannot start the others, so they are pending when
	 * destroy comes (an engine that runs callbacks concurrently starts them
	 * all: they are then running, not pending). */
	CHECK_EQ(arm(e, &hold, 0, ds_hold_cb, NULL), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&ds.hold_started), LIVENESS));
	for (int i = 0; i < DUE; i++)
		CHECK_EQ(arm(e, &due[i], 0, ds_cb, NULL), 0);
	for (int i = 0; i < FAR; i++)
		CHECK_EQ(arm(e, &far[i], 10 * SEC, ds_cb, NULL), 0);
	ds_open(&ds.hold_open);
	CHECK(ds_wait_started(concurrent ? DUE : 1) >= 1);
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(e, &st), 0);
	int started_before = atomic_load(&ds.started);
	CHECK_EQ(st.pending, (uint64_t)(DUE + FAR - started_before));
	if (!concurrent)
		CHECK_EQ(started_before, 1);

	pthread_t opener;
	atomic_store(&ds.destroyer_tid, (int)gettid());
	CHECK_EQ(pthread_create(&opener, NULL, ds_opener, NULL), 0);
	atomic_store(&ds.destroy_called, 1);
	CHECK_EQ(tmo_destroy(&e), 0);
	int in_flight = atomic_load(&ds.in_flight);
	atomic_store(&ds.after_return, 1);
	pthread_join(opener, NULL);
	int threads1 = et_wait_thread_count(threads0, LIVENESS);
	int started = atomic_load(&ds.started);
	printf("  destroy: %llu pending, %d callback(s) running; destroy %s; callbacks started "
	       "during destroy: %d; arms made by the running callback: extra %s, re-arm %s\n",
	       (unsigned long long)st.pending, started_before,
	       ds.destroyer_seen_blocked ? "waited" : "was never seen blocked (gate opened at the bound)",
	       started - started_before, arm_name(ds.rc_extra), arm_name(ds.rc_rearm));
	CHECK(ds.destroyer_seen_blocked);
	CHECK_EQ(atomic_load(&ds.first_done), 1);
	CHECK_EQ(started, started_before); /* nothing started once destroy began */
	CHECK_EQ(in_flight, 0);            /* it waited for the running ones */
	CHECK_EQ(atomic_load(&ds.after_return), 1);
	CHECK_EQ(threads1, threads0);
	CHECK_EQ(tmo_testing_live_allocs(), live0);
}

/* ---- misuse from inside a callback ----------------------------------------------- */

static struct {
	struct tmo *e, *other;
	struct tmo_timer t, t2;
	int rc_destroy, kept, rc_park_on, rc_park_off, rc_destroy_other, rc_arm;
	atomic_llong done, t2_fired;
} mu;

static void misuse_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	struct tmo *self = mu.e;
	mu.rc_destroy = tmo_destroy(&self);
	mu.kept = self == mu.e;
	mu.rc_park_on = tmo_testing_park(mu.e, 1);
	mu.rc_park_off = tmo_testing_park(mu.e, 0);
	mu.rc_destroy_other = tmo_destroy(&mu.other);
	mu.rc_arm = tmo_arm(mu.e, &mu.t2, 0, count_cb, &mu.t2_fired);
	atomic_store(&mu.done, 1);
}

static void test_callback_misuse(void)
{
	memset(&mu, 0, sizeof mu);
	mu.rc_destroy = mu.rc_park_on = mu.rc_park_off = mu.rc_destroy_other = mu.rc_arm = -100;
	mu.e = new_engine();
	mu.other = new_engine();
	if (mu.e == NULL || mu.other == NULL)
		return;
	CHECK_EQ(arm(mu.e, &mu.t, 0, misuse_cb, NULL), 0);
	CHECK(et_wait_ge(&mu.done, 1, LIVENESS));
	printf("  from its own callback: destroy %s, park(1) %s, park(0) %s; destroy of "
	       "another engine %s\n",
	       et_result_name(mu.rc_destroy), et_result_name(mu.rc_park_on),
	       et_result_name(mu.rc_park_off), arm_name(mu.rc_destroy_other));
	CHECK_EQ(mu.rc_destroy, TMO_EDEADLK);
	CHECK_EQ(mu.kept, 1);
	CHECK_EQ(mu.rc_park_on, TMO_EDEADLK);
	CHECK_EQ(mu.rc_park_off, TMO_EDEADLK);
	CHECK_EQ(mu.rc_destroy_other, 0);
	CHECK(mu.other == NULL);
	/* still usable: the arm from the callback fires, and so does one from here */
	CHECK_EQ(mu.rc_arm, 0);
	CHECK(et_wait_ge(&mu.t2_fired, 1, LIVENESS));
	CHECK(is_resolved(tmo_cancel(mu.e, &mu.t)));
	CHECK(is_resolved(tmo_cancel(mu.e, &mu.t2)));
	CHECK_EQ(arm(mu.e, &mu.t2, MS, count_cb, &mu.t2_fired), 0);
	CHECK(et_wait_ge(&mu.t2_fired, 2, LIVENESS));
	CHECK(is_resolved(tmo_cancel(mu.e, &mu.t2)));
	/* A park hook exactly when TMO_CAP_PARK is declared. */
	if (et_ops->caps & TMO_CAP_PARK) {
		CHECK_EQ(tmo_testing_park(mu.e, 1), 0);
		CHECK_EQ(tmo_testing_park(mu.e, 0), 0);
	} else {
		CHECK_EQ(tmo_testing_park(mu.e, 1), TMO_EINVAL);
	}
	struct tmo_stats st;
	CHECK_EQ(tmo_stats(mu.e, &st), 0);
	CHECK_EQ(st.fired, 3);
	CHECK_EQ(st.pending, 0);
	CHECK_EQ(tmo_destroy(&mu.e), 0);
}

/* ---- park straight after a release ------------------------------------------------ */

#define PARK_ROUNDS 3000

static void test_park_rounds(void)
{
	if (!(et_ops->caps & TMO_CAP_PARK)) {
		printf("  no park hook: nothing to run\n");
		return;
	}
	static atomic_llong fired;
	struct tmo *e = new_engine();
	struct tmo_timer t = TMO_TIMER_INIT;
	int armed = 0, bad = 0;
	for (int i = 0; i < PARK_ROUNDS && bad == 0; i++) {
		/* Fired, prevented or never armed: each answer leaves t idle. */
		(void)tmo_cancel(e, &t);
		if (arm(e, &t, 0, count_cb, &fired) == 0)
			armed++;
		bad += tmo_testing_park(e, 1) != 0;
		bad += tmo_testing_park(e, 0) != 0;
	}
	(void)tmo_cancel(e, &t);
	printf("  %d park(1)+park(0) rounds, %d arms due at once, %lld fired meanwhile\n",
	       PARK_ROUNDS, armed, (long long)atomic_load(&fired));
	CHECK_EQ(bad, 0);
	CHECK_EQ(armed, PARK_ROUNDS);
	CHECK_EQ(tmo_destroy(&e), 0);
}

/* ---- stale identities ------------------------------------------------------------- */

static atomic_llong si_fired;

/* A timer whose last arm was on `old` (already destroyed), used through `e`. */
static void expect_refused(struct tmo *e, struct tmo_timer *t, const char *what)
{
	long long fired0 = atomic_load(&si_fired);
	int rc_cancel = tmo_cancel(e, t);
	int rc_arm = tmo_arm(e, t, 0, count_cb, &si_fired);
	int rc_cancel2 = tmo_cancel(e, t);
	if (rc_cancel != TMO_EWRONGENGINE || rc_arm != TMO_EWRONGENGINE ||
	    rc_cancel2 != TMO_EWRONGENGINE)
		fprintf(stderr, "  %s: cancel %s, arm %s, cancel %s (expected TMO_EWRONGENGINE)\n",
		        what, et_result_name(rc_cancel), arm_name(rc_arm),
		        et_result_name(rc_cancel2));
	CHECK_EQ(rc_cancel, TMO_EWRONGENGINE);
	CHECK_EQ(rc_arm, TMO_EWRONGENGINE);
	CHECK_EQ(rc_cancel2, TMO_EWRONGENGINE);
	if (rc_arm == 0) /* wrongly accepted: resolve it before the timer is reused */
		tmo_cancel(e, t);
	CHECK_EQ(atomic_load(&si_fired), fired0);
	/* re-initialised, the timer works on the new engine */
	tmo_timer_init(t);
	CHECK_EQ(arm(e, t, 0, count_cb, &si_fired), 0);
	CHECK(et_wait_ge(&si_fired, fired0 + 1, LIVENESS));
	CHECK(is_resolved(tmo_cancel(e, t)));
}

/* Create an engine of `ops`, trying to get the address `want` (malloc
 * usually hands back the block just freed). */
static struct tmo *create_at(const struct tmo_engine_ops *ops, void *want, int *reused)
{
	struct tmo *held[16];
	int nheld = 0;
	struct tmo *e = NULL;
	for (int i = 0; i < 16; i++) {
		int rc = tmo_create_ops(ops, NULL, &e);
		et_skip_if_shortage(et_ops, rc, et_case_now());
		CHECK_EQ(rc, 0);
		if (rc != 0 || (void *)e == want || i == 15)
			break;
		held[nheld++] = e; /* keep it, so the next create gets another block */
	}
	*reused = (void *)e == want;
	while (nheld > 0)
		tmo_destroy(&held[--nheld]);
	return e;
}

/* Timers last armed on a destroyed engine, and what each stands for. */
struct stale {
	struct tmo_timer *t;
	const char *what;
};

/* Create this engine where a destroyed one lay (create_at: when malloc
 * hands the address back) and check that each stale timer is refused on
 * it; counts the try and whether the address was reused.  Returns 0 when
 * create failed (its check has failed). */
static int refused_at(void *addr, const struct stale *st, int n, int *tries, int *reuses)
{
	int reused;
	struct tmo *e = create_at(et_ops, addr, &reused);
	if (e == NULL)
		return 0;
	(*tries)++;
	*reuses += reused;
	for (int i = 0; i < n; i++)
		expect_refused(e, st[i].t, st[i].what);
	CHECK_EQ(tmo_destroy(&e), 0);
	return 1;
}

static void test_stale_identity(void)
{
	static struct tmo_timer pend, fired;
	int reuses = 0, tries = 0;

	/* the same kind: pending at destroy, and fired before destroy */
	tmo_timer_init(&pend);
	tmo_timer_init(&fired);
	struct tmo *a = new_engine();
	if (a == NULL)
		return;
	void *addr = a;
	CHECK_EQ(arm(a, &pend, 60 * SEC, count_cb, &si_fired), 0);
	CHECK_EQ(arm(a, &fired, 0, count_cb, &si_fired), 0);
	CHECK(et_wait_ge(&si_fired, 1, LIVENESS));
	CHECK_EQ(tmo_destroy(&a), 0);
	const struct stale same[] = {{&pend, "timer pending on a destroyed engine"},
	                             {&fired, "timer fired on a destroyed engine"}};
	if (!refused_at(addr, same, 2, &tries, &reuses))
		return;

	/* another kind first, then this one (the wheel-then-posix) */
	for (const struct tmo_engine_ops *const *o = tmo_engines(); *o != NULL; o++) {
		if (*o == et_ops)
			continue;
		struct tmo *y = NULL;
		int rc = tmo_create_ops(*o, NULL, &y);
		if (rc == TMO_EAGAIN || rc == TMO_EUNAVAIL) {
			/* EUNAVAIL: its kernel facility is missing here (io_uring
			 * under qemu-user or a container's seccomp profile) */
			printf("  stale identity: engine %s refused create (%s): skipped\n", (*o)->name,
			       tmo_errname(rc));
			continue;
		}
		CHECK_EQ(rc, 0);
		if (rc != 0)
			continue;
		tmo_timer_init(&pend);
		rc = tmo_arm(y, &pend, 60 * SEC, count_cb, &si_fired);
		if (rc == TMO_EAGAIN) {
			tmo_destroy(&y);
			continue;
		}
		CHECK_EQ(rc, 0);
		addr = y;
		CHECK_EQ(tmo_destroy(&y), 0);
		char what[96];
		snprintf(what, sizeof what, "timer pending on a destroyed %s engine", (*o)->name);
		const struct stale other[] = {{&pend, what}};
		if (!refused_at(addr, other, 1, &tries, &reuses))
			return;
	}
	printf("  stale identity: the new engine reused the old one's address in %d of %d "
	       "cases\n", reuses, tries);
}

int main(int argc, char **argv)
{
	lifecycle_begin(argc, argv, "engine_lifecycle");
	et_case_watchdog(60);
	RUN(test_destroy);
	et_case_watchdog(30);
	RUN(test_callback_misuse);
	et_case_watchdog(60);
	RUN(test_park_rounds);
	RUN(test_stale_identity);
	return TEST_EXIT();
}
