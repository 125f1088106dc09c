/*
 * Order (guarantee 4) while the engine's own threads get no CPU.
 *
 * A real-time (SCHED_FIFO) spinner takes one CPU, and every thread the
 * engine started (named "tmo-<engine>", tmo.h) is moved onto that CPU: they
 * do not run until the spinner stops.  Meanwhile this thread, on another
 * CPU, arms and cancels flat out and then arms timer A.  The starvation
 * lasts STARVE; once the engine runs again, timer B is armed due GAP after
 * A's deadline (measured from the clock read after A's arm returned, and
 * GAP is more than the resolution), so A must fire first.
 *
 * An engine that dates an arm by something the starved threads publish (a
 * tick) instead of the clock at the arm dates A when they run again, up to
 * STARVE late, and B fires first: what this test catches.  A preempted
 * timer thread on a loaded machine is the same thing, less reliably.
 *
 * Needs two CPUs and the right to use SCHED_FIFO (CAP_SYS_NICE, or an
 * RLIMIT_RTPRIO): without them it says why and is skipped (exit 77).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC
#define ROUNDS 4
#define STREAM (3 * MS)   /* arm+cancel flat out, starved, before A */
#define STARVE (40 * MS)  /* from A's arm to the spinner's stop */
#define TIMEOUT (80 * MS) /* A's: beyond the starvation */
#define GAP (10 * MS)     /* B after A, beyond the resolution */
#define SPIN_CAP (500 * MS)

static int cpu_starved, cpu_mine;

/* 0 idle, 1 spin, 2 exit; `spinning` says the spinner holds its CPU. */
static atomic_int spin_cmd, spinning;

static int pin(pid_t tid, int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return sched_setaffinity(tid, sizeof s, &s);
}

static void *spinner(void *arg)
{
	(void)arg;
	for (;;) {
		while (atomic_load(&spin_cmd) == 0)
			et_sleep_ns(100 * TMO_NSEC_PER_USEC);
		if (atomic_load(&spin_cmd) == 2)
			return NULL;
		atomic_store(&spinning, 1);
		int64_t end = tmo_now_ns() + SPIN_CAP; /* never hold a CPU for long */
		while (atomic_load(&spin_cmd) == 1 && tmo_now_ns() < end)
			;
		atomic_store(&spinning, 0);
		while (atomic_load(&spin_cmd) == 1)
			et_sleep_ns(100 * TMO_NSEC_PER_USEC);
	}
}

/* Two CPUs this process may use, and a FIFO spinner on the first: 0, or
 * exits 77 saying what is missing. */
static pthread_t start_spinner(void)
{
	cpu_set_t s;
	CHECK_EQ(sched_getaffinity(0, sizeof s, &s), 0);
	cpu_starved = cpu_mine = -1;
	for (int c = 0; c < CPU_SETSIZE && cpu_mine < 0; c++)
		if (CPU_ISSET(c, &s)) {
			if (cpu_starved < 0)
				cpu_starved = c;
			else
				cpu_mine = c;
		}
	if (cpu_mine < 0) {
		printf("SKIP: needs two CPUs (this process may use %d)\n", CPU_COUNT(&s));
		exit(77);
	}
	pthread_attr_t a;
	CHECK_EQ(pthread_attr_init(&a), 0);
	CHECK_EQ(pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED), 0);
	CHECK_EQ(pthread_attr_setschedpolicy(&a, SCHED_FIFO), 0);
	struct sched_param p = {.sched_priority = 1};
	CHECK_EQ(pthread_attr_setschedparam(&a, &p), 0);
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu_starved, &one);
	CHECK_EQ(pthread_attr_setaffinity_np(&a, sizeof one, &one), 0);
	pthread_t th;
	int rc = pthread_create(&th, &a, spinner, NULL);
	pthread_attr_destroy(&a);
	if (rc == EPERM) {
		printf("SKIP: starving a thread takes a SCHED_FIFO spinner, which this process "
		       "may not start (CAP_SYS_NICE or RLIMIT_RTPRIO)\n");
		exit(77);
	}
	CHECK_EQ(rc, 0);
	CHECK_EQ(pin(0, cpu_mine), 0);
	return th;
}

/* Move every engine thread onto the spinner's CPU; returns how many. */
static int pin_engine_threads(void)
{
	pid_t ids[1024];
	int m = et_engine_thread_ids(ids, 1024), n = 0;
	for (int i = 0; i < m; i++)
		n += pin(ids[i], cpu_starved) == 0;
	return n;
}

struct fired {
	atomic_int seq;
	int64_t at;
};
static atomic_int fire_seq;

static void fired_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	struct fired *f = arg;
	f->at = tmo_now_ns();
	atomic_store(&f->seq, atomic_fetch_add(&fire_seq, 1) + 1);
}

static void noop_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
}

static void stream(struct tmo *e, int64_t ns)
{
	struct tmo_timer s = TMO_TIMER_INIT;
	for (int64_t end = tmo_now_ns() + ns; tmo_now_ns() < end;) {
		CHECK_EQ(tmo_arm(e, &s, TMO_NSEC_PER_SEC, noop_cb, NULL), 0);
		CHECK_EQ(tmo_cancel(e, &s), TMO_CANCEL_PREVENTED);
	}
}

/* One round; returns 1 when B fired before A, 0 when A fired first, -1 when
 * the round could not be judged. */
static int round_once(int r)
{
	struct tmo *e = et_create_or_skip(et_ops, "create");
	if (e == NULL)
		return 0;
	struct tmo_timer a = TMO_TIMER_INIT, b = TMO_TIMER_INIT;
	struct fired fa = {0}, fb = {0};
	atomic_store(&fire_seq, 0);
	stream(e, STREAM); /* the engine sees arms coming */
	int pinned = pin_engine_threads();
	atomic_store(&spin_cmd, 1);
	CHECK(ET_WAIT_UNTIL(atomic_load(&spinning), 10 * TMO_NSEC_PER_SEC));
	stream(e, STREAM);
	CHECK_EQ(et_arm_or_skip(e, &a, TIMEOUT, fired_cb, &fa, "arm A"), 0);
	int64_t a_due = tmo_now_ns() + TIMEOUT; /* no earlier than the engine's */
	pinned += pin_engine_threads(); /* a thread per timer: A's own */
	et_sleep_ns(STARVE); /* the workload: the engine's threads get no CPU */
	atomic_store(&spin_cmd, 0);
	CHECK(ET_WAIT_UNTIL(!atomic_load(&spinning), 10 * TMO_NSEC_PER_SEC));
	int64_t b_due = a_due + et_ops->resolution_ns + GAP, left = b_due - tmo_now_ns();
	if (left <= 0) { /* this thread was kept off its CPU past B's deadline */
		printf("  round %d: not judged: B's deadline passed before it could be armed\n", r);
		CHECK(ET_WAIT_UNTIL(atomic_load(&fa.seq), 10 * TMO_NSEC_PER_SEC));
		CHECK_EQ(et_cancel_settled(e, &a), TMO_CANCEL_FIRED);
		CHECK_EQ(tmo_destroy(&e), 0);
		return -1;
	}
	CHECK_EQ(et_arm_or_skip(e, &b, left, fired_cb, &fb, "arm B"), 0);
	CHECK(ET_WAIT_UNTIL(atomic_load(&fa.seq) && atomic_load(&fb.seq), 10 * TMO_NSEC_PER_SEC));
	int inverted = atomic_load(&fb.seq) < atomic_load(&fa.seq);
	printf("  round %d: %d engine threads starved %lld ms; A fired %s, %.3f ms after its "
	       "deadline; B %.3f ms after its own, %lld ms later\n",
	       r, pinned, (long long)(STARVE / MS), inverted ? "SECOND" : "first",
	       (double)(fa.at - a_due) / 1e6, (double)(fb.at - b_due) / 1e6,
	       (long long)((b_due - a_due) / MS));
	CHECK_EQ(et_cancel_settled(e, &a), TMO_CANCEL_FIRED);
	CHECK_EQ(et_cancel_settled(e, &b), TMO_CANCEL_FIRED);
	CHECK_EQ(tmo_destroy(&e), 0);
	return inverted;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	et_init(argc, argv, "engine_starved");
	pthread_t th = start_spinner();
	int inversions = 0, judged = 0;
	for (int r = 0; r < ROUNDS; r++) {
		int got = round_once(r);
		judged += got >= 0;
		inversions += got > 0;
	}
	atomic_store(&spin_cmd, 2);
	pthread_join(th, NULL);
	printf("  starved: %d of %d rounds judged fired B (due %lld us after A) first\n",
	       inversions, judged, (long long)((et_ops->resolution_ns + GAP) / TMO_NSEC_PER_USEC));
	CHECK(judged > 0);
	CHECK_EQ(inversions, 0);
	return TEST_EXIT();
}
