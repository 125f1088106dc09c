/*
 * Steps between the TSC and the clock (src/lf/clock.c, Steps): what a
 * virtual machine's pause and resume may do, made here by the test hooks
 * that add to every TSC read or every clock read from a point on
 * (src/lf/hook.h).  No arm is made between a step and the calibration
 * that finds it (the one window the core cannot see: clock.c); every arm
 * is judged by the clock reads around it: no callback may run before
 * the clock read before its arm plus its timeout.
 *
 *   rate    The TSC steps RATE_STEP ahead.  Once the timer thread has found
 *           it and published a rate again, it is parked and held arms
 *           made (the ring full of live arms: each filed at once by its
 *           owner, the wheel's from the owner's copy of a pair, mpsc's
 *           into the inbox, for the timer thread to convert from its
 *           latest pair), one every ARM_GAP.  A rate measured across the
 *           step (as from the process's first pair, before) is half the
 *           true one or less: every conversion dates an arm early by half
 *           its distance from its pair or more.
 *   copy    The clock steps STEP ahead (the TSC does not).  The owner's
 *           copy of a pair, taken before it, still dates stamps near it:
 *           once the step is found and a rate is published, the timer
 *           thread parked, held arms on the wheel: dated from the copy
 *           they would be early by STEP.  Judged when the last of them
 *           lay within the copy's near window (else the copy is taken
 *           again all the same: a slow machine, qemu); retried.
 *   before  The TSC steps BEFORE_STEP ahead while the wheel's owner holds
 *           an arm X (timeout BEFORE_TIMEOUT), stamped before it, in
 *           transit (hook.h); it files X once the step is found and a
 *           rate is published.  Converted back from a pair after the
 *           step, X's stamp lies BEFORE_STEP before it: early by that,
 *           due before it was armed, unless a stamp made before the pair
 *           that found the step is dated by that pair's clock read
 *           (cal.lo).  Judged on state: once X is filed, by the timer
 *           thread's next rounds, which fire it if it is due; X must not
 *           have run, and its cancel must prevent it.  (With a timeout of
 *           20 ms, judged by whether X ran before its arm's clock read
 *           plus 20 ms, the plant went uncaught whenever the hold, the
 *           step's finding and the filing took longer than that: 1 run
 *           in 3 under TSan beside six busy loops.)
 *
 * Built again with each defect planted (tests/hooked/hooked.cmake): no
 * step found (TMO_LF_PLANT_STEP_NONE: hooked/lf_step-planted-none, rate
 * must report early arms), owners' copies kept across a step
 * (TMO_LF_PLANT_STEP_EPOCH: -planted-epoch, copy must), stamps before a
 * step converted across it (TMO_LF_PLANT_STEP_LO: -planted-lo, before
 * must).  Where arms stamp with the clock (no usable counter,
 * TMO_LF_CLOCK=1) there is no step to find: skipped.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine_test.h"
#include "hold.h"
#include "lf/clock.h"
#include "lf/hook.h"
#include "lf/lf.h"
#include "lf/rec.h"
#include "need_tsc.h"
#include "tmo/testing.h"

#define MS TMO_NSEC_PER_MSEC
#define WAIT (30 * TMO_NSEC_PER_SEC)
#define STEP (300 * MS)
/* rate's step: longer than FIND, so that a rate measured across it (from
 * a pair FIND or less before it) is half the true one or less */
#define RATE_STEP (5 * TMO_NSEC_PER_SEC)
#define FIND (2 * TMO_NSEC_PER_SEC) /* a step is found in the next round */
#define ARMS 40
#define ARM_GAP (500 * TMO_NSEC_PER_USEC)
#define TIMEOUT (20 * MS)
#define FILLER (60 * TMO_NSEC_PER_SEC)
#define TRIES 5
/* before's: a timeout no round after the filing reaches, and a step
 * longer than it (a planted conversion dates X due before its arm) */
#define BEFORE_TIMEOUT (600 * TMO_NSEC_PER_SEC)
#define BEFORE_STEP (2 * BEFORE_TIMEOUT)
#define BEFORE_ROUNDS 3

struct judged {
	struct tmo_timer t;
	int64_t before; /* the clock read before its arm, plus the timeout */
	atomic_llong ran;
};
static struct judged arms[ARMS];
static struct tmo_timer fill[2][LF_RING_SLOTS];
static int filled[2];

static void ran_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_store(&((struct judged *)arg)->ran, tmo_now_ns());
}
static void never_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

static int arm_judged(struct tmo *e, struct judged *j, int64_t timeout)
{
	tmo_timer_init(&j->t);
	atomic_store(&j->ran, 0);
	j->before = tmo_now_ns() + timeout;
	return tmo_arm(e, &j->t, timeout, ran_cb, j);
}

/* How many of j[0..n) ran before their arm's clock read plus timeout;
 * *worst: by how much at most. */
static int early_of(struct judged *j, int n, int64_t *worst)
{
	int early = 0;
	*worst = 0;
	for (int i = 0; i < n; i++) {
		int64_t by = j[i].before - atomic_load(&j[i].ran);
		if (by > 0) {
			early++;
			*worst = by > *worst ? by : *worst;
		}
	}
	return early;
}

static int all_ran(struct judged *j, int n)
{
	for (int i = 0; i < n; i++)
		if (atomic_load(&j[i].ran) == 0)
			return 0;
	return 1;
}

/* A step found since `epoch`, and a rate published again over a few
 * calibrations after it.  Returns 0 when no step was found in FIND (its
 * calibration is the timer thread's next round); the rate must come in
 * WAIT all the same. */
static int step_found(struct tmo *e, uint32_t epoch, const char *what)
{
	int found = ET_WAIT_UNTIL(atomic_load(&e->cal.epoch) != epoch, FIND);
	if (!found)
		printf("%s: the step was not found (calibration epoch still %u)\n", what, epoch);
	/* the step's calibration published no rate: one after it did */
	uint32_t s0 = atomic_load(&e->cal.seq);
	CHECK(ET_WAIT_UNTIL(atomic_load(&e->cal.seq) - s0 >= 2 && atomic_load(&e->cal.rate_fx) != 0,
	                    WAIT));
	return found;
}

/* The TSC ticks `ns` takes at the published rate. */
static uint64_t ticks_of(struct tmo *e, int64_t ns)
{
	uint64_t rate = atomic_load(&e->cal.rate_fx);
	return (uint64_t)(((unsigned __int128)ns << 32) / rate);
}

static struct tmo *ready(const char *eng)
{
	struct tmo *e = NULL;
	CHECK_EQ(tmo_create(eng, NULL, &e), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&e->cal.rate_fx) != 0, WAIT));
	for (int k = 0; k < 2; k++) {
		filled[k] = 0;
		for (int i = 0; i < LF_RING_SLOTS; i++)
			tmo_timer_init(&fill[k][i]);
	}
	return e;
}

/* The timer thread parked (no calibration, no steal) and this thread's
 * ring full of live arms (fill[k]): each arm after is its owner's to file
 * at once, the wheel's converted from the owner's copy of a pair, over a
 * distance that grows with each. */
static void park_and_fill(struct tmo *e, int k)
{
	CHECK_EQ(tmo_testing_park(e, 1), 0);
	for (int i = 0; i < LF_RING_SLOTS; i++)
		CHECK_EQ(tmo_arm(e, &fill[k][i], FILLER, never_cb, NULL), 0);
	filled[k] = 1;
}

static void done(struct tmo *e)
{
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < LF_RING_SLOTS && filled[k]; i++)
			CHECK_EQ(tmo_cancel(e, &fill[k][i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_destroy(&e), 0);
}

static void report(const char *what, int n, int early, int64_t worst)
{
	if (early > 0)
		printf("%s: %d of %d arms fired early, the worst %.3f ms before its arm's clock read "
		       "plus its timeout\n",
		       what, early, n, (double)worst / MS);
	else
		printf("%s: %d arms, none early\n", what, n);
}

/* ---- rate ------------------------------------------------------------------------- */

static void rate_on(const char *eng)
{
	char what[32];
	snprintf(what, sizeof what, "rate/%s", eng);
	struct tmo *e = ready(eng);
	uint32_t epoch = atomic_load(&e->cal.epoch);
	atomic_fetch_add(&tmo__test_tsc_skew, ticks_of(e, RATE_STEP));
	CHECK(step_found(e, epoch, what));
	park_and_fill(e, 0);
	for (int i = 0; i < ARMS; i++) {
		CHECK_EQ(arm_judged(e, &arms[i], TIMEOUT), 0);
		et_sleep_ns(ARM_GAP);
	}
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK(ET_WAIT_UNTIL(all_ran(arms, ARMS), WAIT));
	int64_t worst;
	int early = early_of(arms, ARMS, &worst);
	report(what, ARMS, early, worst);
	CHECK_EQ(early, 0);
	done(e);
}

static void rate(void)
{
	rate_on("wheel");
	rate_on("mpsc");
}

/* ---- copy ------------------------------------------------------------------------- */

/* One try: 1 when judged (every arm was made while the owner's copy from
 * before the step would still date it: within its near window), or when
 * the step was not found (a failure: no retry). */
static int copy_once(void)
{
	struct tmo *e = ready("wheel");
	/* one held arm: the owner takes its copy of the published pair */
	struct tmo_timer h;
	tmo_timer_init(&h);
	park_and_fill(e, 0);
	CHECK_EQ(tmo_arm(e, &h, FILLER, never_cb, NULL), 0);
	struct lf_cal_snap old = tmo__lf_tls_hot.rec->cal;
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	uint32_t epoch = atomic_load(&e->cal.epoch);
	atomic_fetch_add(&tmo__test_clock_skew, STEP);
	int found = step_found(e, epoch, "copy");
	CHECK(found);
	park_and_fill(e, 1);
	for (int i = 0; i < ARMS; i++)
		CHECK_EQ(arm_judged(e, &arms[i], TIMEOUT), 0);
	int judged = !found || (old.near != 0 && lf_tsc() - old.tsc <= old.near);
	CHECK_EQ(tmo_testing_park(e, 0), 0);
	CHECK(ET_WAIT_UNTIL(all_ran(arms, ARMS), WAIT));
	int64_t worst;
	int early = early_of(arms, ARMS, &worst);
	report("copy", ARMS, early, worst);
	CHECK_EQ(early, 0);
	CHECK_EQ(tmo_cancel(e, &h), TMO_CANCEL_PREVENTED);
	done(e);
	return judged;
}

static void copy(void)
{
	int judged = 0, tries = 0;
	while (!judged && tries++ < TRIES)
		judged = copy_once();
	printf("copy: %s after %d tries\n", judged ? "judged" : "NOT judged", tries);
	CHECK(judged);
}

/* ---- before ----------------------------------------------------------------------- */

struct owner {
	struct tmo *e, *away;
	struct tmo_timer fill[LF_RING_SLOTS];
	int rc;
};

/* Arm X, then fill the ring until X's slot is needed again: that arm,
 * on the general path (hold.h, go_general), spills X, and the hook holds
 * this thread with X in transit. */
static void *owner_main(void *arg)
{
	struct owner *o = arg;
	owner_thread = 1;
	o->rc = arm_judged(o->e, &arms[0], BEFORE_TIMEOUT);
	for (int i = 0; i < LF_RING_SLOTS && o->rc == 0; i++) {
		tmo_timer_init(&o->fill[i]);
		if (i == LF_RING_SLOTS - 1)
			o->rc = go_general(o->away);
		if (o->rc == 0)
			o->rc = tmo_arm(o->e, &o->fill[i], FILLER, never_cb, NULL);
	}
	return NULL;
}

static void before(void)
{
	hold_reset();
	struct owner o = {0};
	CHECK_EQ(tmo_create("wheel", NULL, &o.e), 0);
	CHECK_EQ(tmo_create("mpsc", NULL, &o.away), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&o.e->cal.rate_fx) != 0, WAIT));
	/* parked, the timer thread steals nothing: X stays in its slot until
	 * the owner spills it */
	CHECK_EQ(tmo_testing_park(o.e, 1), 0);
	atomic_store(&hold, HOLD_TRANSIT);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, owner_main, &o), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&held), WAIT));
	uint32_t epoch = atomic_load(&o.e->cal.epoch);
	atomic_fetch_add(&tmo__test_tsc_skew, ticks_of(o.e, BEFORE_STEP));
	CHECK_EQ(tmo_testing_park(o.e, 0), 0);
	CHECK(step_found(o.e, epoch, "before"));
	atomic_store(&release, 1);
	pthread_join(th, NULL);
	CHECK_EQ(o.rc, 0);
	/* X is filed (the owner returned): due, it fires in the timer
	 * thread's next rounds; BEFORE_TIMEOUT away, in none of them */
	for (int k = 0; k < BEFORE_ROUNDS && !all_ran(arms, 1); k++)
		CHECK(round_after(o.e, tmo_now_ns(), NULL));
	/* read once: a run the judgement missed fails the cancel below */
	int ran = all_ran(arms, 1);
	int64_t worst = 0;
	int early = ran ? early_of(arms, 1, &worst) : 0;
	report("before", 1, early, worst);
	CHECK_EQ(early, 0);
	if (!ran)
		CHECK_EQ(tmo_cancel(o.e, &arms[0].t), TMO_CANCEL_PREVENTED);
	for (int i = 0; i < LF_RING_SLOTS; i++)
		CHECK_EQ(tmo_cancel(o.e, &o.fill[i]), TMO_CANCEL_PREVENTED);
	CHECK_EQ(tmo_destroy(&o.e), 0);
	CHECK_EQ(tmo_destroy(&o.away), 0);
}

int main(void)
{
	int rc = need_tsc("lf_step", "wheel", "no step to find");
	if (rc >= 0)
		return rc;
	/* the timer thread never sleeps: its rounds (and calibrations) keep
	 * coming while the test waits for them */
	tmo_testing_timely_timer(1);
	atomic_store(&tmo__lf_hook_transit, hold_transit);
	RUN(rate);
	RUN(copy);
	RUN(before);
	return TEST_EXIT();
}
