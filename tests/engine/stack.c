/*
 * Callback stack: `test_engine_stack ENGINE`.
 *
 * tmo.h promises every engine's callbacks at least TMO_CALLBACK_STACK_MIN
 * bytes of stack.  A callback measures the stack left below its own frame
 * (pthread_getattr_np: the lowest usable address of its thread's stack) and
 * then uses a frame of FRAME bytes, touching every page from the top down so
 * that an overrun meets the guard page (a fault) instead of skipping it.
 *
 * Twice: with the process's default thread attributes as they come, and
 * again after the default stack size was lowered to 64 KiB (what a small
 * RLIMIT_STACK at startup, or pthread_setattr_default_np, gives threads that
 * an engine creates with default attributes): the engine must still raise
 * its threads' stacks to the minimum.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"

#define FRAME (200 * 1024)
#define SMALL_DEFAULT (64 * 1024)
/* 64 KiB, or the platform's least where that is more (arm64's glibc:
 * 128 KiB; pthread_attr_setstacksize refuses less with EINVAL) */
static size_t small_default(void)
{
	long min = sysconf(_SC_THREAD_STACK_MIN);
	return min > SMALL_DEFAULT ? (size_t)min : SMALL_DEFAULT;
}

static atomic_llong done;
static _Atomic int64_t room;    /* bytes below the callback's frame */
static atomic_llong frame_sum; /* what the big frame computed */

/* Not inlined: the frame is this function's own, below the callback's. */
static __attribute__((noinline)) long long use_big_frame(void)
{
	char buf[FRAME];
	volatile char *v = buf;
	for (long i = FRAME - 1; i >= 0; i -= 512)
		v[i] = (char)(i >> 9);
	long long sum = 0;
	for (long i = FRAME - 1; i >= 0; i -= 512)
		sum += v[i];
	return sum;
}

static void cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	/* The frame address, not a local's: ASan may keep locals elsewhere. */
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);
	pthread_attr_t a;
	int64_t left = -1;
	if (pthread_getattr_np(pthread_self(), &a) == 0) {
		void *lo;
		size_t sz;
		if (pthread_attr_getstack(&a, &lo, &sz) == 0)
			left = (int64_t)(here - (uintptr_t)lo);
		pthread_attr_destroy(&a);
	}
	atomic_store(&room, left);
	atomic_store(&frame_sum, use_big_frame());
	atomic_fetch_add(&done, 1);
}

static long long expected_sum(void)
{
	long long sum = 0;
	for (long i = FRAME - 1; i >= 0; i -= 512)
		sum += (char)(i >> 9);
	return sum;
}

static void run_once(const char *what)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(et_ops, NULL, &e);
	CHECK_EQ(rc, 0);
	if (rc != 0)
		return;
	struct tmo_timer t = TMO_TIMER_INIT;
	long long before = atomic_load(&done);
	atomic_store(&room, -1);
	rc = tmo_arm(e, &t, 0, cb, NULL);
	if (rc == TMO_EAGAIN) {
		printf("SKIP %s: arm refused with TMO_EAGAIN (out of threads or kernel timers)\n",
		       what);
		tmo_destroy(&e);
		return;
	}
	CHECK_EQ(rc, 0);
	/* Bounded: a callback that never ran fails here instead of hanging. */
	CHECK(et_wait_ge(&done, before + 1, 60 * TMO_NSEC_PER_SEC));
	int c = tmo_cancel(e, &t);
	CHECK(c == TMO_CANCEL_FIRED || c == TMO_CANCEL_WAITED);
	int64_t left = atomic_load(&room);
	printf("  %s: %lld KiB of stack below the callback's frame (minimum %d KiB); a %d KiB "
	       "frame ran\n",
	       what, (long long)(left / 1024), TMO_CALLBACK_STACK_MIN / 1024, FRAME / 1024);
	CHECK(left >= TMO_CALLBACK_STACK_MIN);
	CHECK_EQ(atomic_load(&frame_sum), expected_sum());
	tmo_destroy(&e);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* a crash must not swallow the lines before it */
	et_init(argc, argv, "engine_stack");
	run_once("default thread attributes");

	pthread_attr_t small;
	CHECK_EQ(pthread_attr_init(&small), 0);
	size_t lowered = small_default();
	CHECK_EQ(pthread_attr_setstacksize(&small, lowered), 0);
	CHECK_EQ(pthread_setattr_default_np(&small), 0);
	pthread_attr_destroy(&small);
	char what[64];
	snprintf(what, sizeof what, "default stack lowered to %zu KiB", lowered / 1024);
	run_once(what);
	return TEST_EXIT();
}
