/*
 * The promise of TMO_CAP_RUN_ON_LOOP, on one engine: `test_engine_run_on_loop
 * ENGINE`.  An engine with the capability runs a function on its loop thread
 * (tmo_testing_run_on_loop, tmo/testing.h): the function runs once, on the
 * thread that runs the engine's callbacks, and has returned when the call
 * returns; inside it arm and cancel work (a cancel prevents what it armed,
 * a timer armed there fires after it returned), no timer of the engine
 * fires while it runs, and destroy of the engine from inside it is refused
 * (TMO_EDEADLK: it is the engine's own thread).  From a callback the
 * function runs at once, on that thread.  An engine without the capability
 * answers TMO_EINVAL, as it must for a NULL function.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC
#define LIVENESS (10 * TMO_NSEC_PER_SEC)

static struct tmo *eng;
static atomic_llong cb_fired, fn_runs, nested_runs, armed_fired;
static atomic_long cb_tid, fn_tid, nested_tid;
static struct tmo_timer probe = TMO_TIMER_INIT, held = TMO_TIMER_INIT, armed = TMO_TIMER_INIT;
static int held_cancel = 99, fn_destroy = 99, fn_arm = 99, fn_arm2 = 99;
static long long fired_during_fn = -1;

static long tid(void) { return (long)syscall(SYS_gettid); }

static void nested_fn(void *arg)
{
	(void)arg;
	atomic_store(&nested_tid, tid());
	atomic_fetch_add(&nested_runs, 1);
}

static void probe_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	atomic_store(&cb_tid, tid());
	/* From the loop thread itself: runs at once. */
	long long before = atomic_load(&nested_runs);
	CHECK_EQ(tmo_testing_run_on_loop(eng, nested_fn, NULL), 0);
	CHECK_EQ(atomic_load(&nested_runs), before + 1);
	atomic_fetch_add(&cb_fired, 1);
}

static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_llong *)arg, 1);
}

static void on_loop(void *arg)
{
	(void)arg;
	atomic_store(&fn_tid, tid());
	fn_arm = tmo_arm(eng, &held, 10 * MS, count_cb, &armed_fired);
	if (fn_arm == 0)
		held_cancel = tmo_cancel(eng, &held);
	fn_arm2 = tmo_arm(eng, &armed, 0, count_cb, &armed_fired);
	/* Due at once, yet it must not fire while this function runs. */
	et_sleep_ns(20 * MS);
	fired_during_fn = atomic_load(&armed_fired);
	struct tmo *self = eng;
	fn_destroy = tmo_destroy(&self);
	atomic_fetch_add(&fn_runs, 1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	et_init(argc, argv, "engine_run_on_loop");
	CHECK_EQ(tmo_create_ops(et_ops, NULL, &eng), 0);
	if (eng == NULL)
		return TEST_EXIT();
	if (!(et_ops->caps & TMO_CAP_RUN_ON_LOOP)) {
		CHECK_EQ(tmo_testing_run_on_loop(eng, on_loop, NULL), TMO_EINVAL);
		CHECK_EQ(atomic_load(&fn_runs), 0);
		printf("no TMO_CAP_RUN_ON_LOOP: run_on_loop refused with TMO_EINVAL\n");
		CHECK_EQ(tmo_destroy(&eng), 0);
		return TEST_EXIT();
	}
	CHECK_EQ(tmo_testing_run_on_loop(eng, NULL, NULL), TMO_EINVAL);
	CHECK_EQ(tmo_arm(eng, &probe, 0, probe_cb, NULL), 0);
	CHECK(et_wait_ge(&cb_fired, 1, LIVENESS));
	CHECK_EQ(atomic_load(&nested_tid), atomic_load(&cb_tid));

	CHECK_EQ(tmo_testing_run_on_loop(eng, on_loop, NULL), 0);
	CHECK_EQ(atomic_load(&fn_runs), 1); /* ran once, returned before the call did */
	CHECK(atomic_load(&fn_tid) != tid());
	CHECK_EQ(atomic_load(&fn_tid), atomic_load(&cb_tid)); /* the callbacks' thread */
	CHECK_EQ(fn_arm, 0);
	CHECK_EQ(held_cancel, TMO_CANCEL_PREVENTED);
	CHECK_EQ(fn_arm2, 0);
	CHECK_EQ(fired_during_fn, 0);
	CHECK_EQ(fn_destroy, TMO_EDEADLK);
	CHECK(et_wait_ge(&armed_fired, 1, LIVENESS)); /* fires once the function returned */
	et_sleep_ns(20 * MS);
	CHECK_EQ(atomic_load(&armed_fired), 1); /* and the cancelled one never */
	CHECK_EQ(tmo_cancel(eng, &armed), TMO_CANCEL_FIRED);
	printf("run_on_loop: ran on the loop thread (tid %ld), arm+cancel there PREVENTED, "
	       "nothing fired while it ran, destroy there TMO_EDEADLK\n",
	       atomic_load(&fn_tid));
	CHECK_EQ(tmo_destroy(&eng), 0);
	return TEST_EXIT();
}
