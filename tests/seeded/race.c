/*
 * The seeded race: proof that the ThreadSanitizer check CAN fail.
 *
 * A toy one-thread timer with a deliberate bug: its fire path (timer thread)
 * and its cancel path (caller) both read and write the timer's plain `int
 * state` with no lock and no atomic.  Whichever runs second touches memory
 * the other wrote without a happens-before edge: a data race, every time.
 *
 * This is a test fixture, not an engine: it is not in impls/ and never in the
 * registry.  tests/seeded/sanitizers.cmake registers it in the TSan build only, with
 * WILL_FAIL (TSan must make it exit non-zero) and again requiring TSan's
 * report to name toy_fire/toy_cancel.
 *
 * Both racing threads are kept alive until both have made their accesses (a
 * barrier after the race): TSan reliably reports a race between live
 * threads, but missed one against an already exited thread about 1 run in 10
 * on this toolchain.
 *
 * Without TSan the program runs to completion and exits 0 (it does not check
 * its own exactly-once outcome: the point is that only the sanitizer can see
 * the bug), so WILL_FAIL passes only when TSan reports.
 * Usage: seeded_race [rounds]   (default 1; each round is a fresh race)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum toy_state { TOY_IDLE, TOY_ARMED, TOY_FIRED, TOY_CANCELLED };

struct toy_timer {
	int state; /* THE BUG: shared between two threads, plain int */
	int64_t deadline_ns;
	int fired_calls;
};

struct toy_engine {
	pthread_t thread;
	pthread_barrier_t armed;   /* arm -> timer thread may start waiting */
	pthread_barrier_t settled; /* both sides made their racing access */
	struct toy_timer *timer;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Timer-thread side: fire if still armed.  Unsynchronised read+write. */
static __attribute__((noinline)) void toy_fire(struct toy_timer *t)
{
	if (t->state == TOY_ARMED) {
		t->state = TOY_FIRED;
		t->fired_calls++;
	}
}

/* Caller side: cancel if still armed.  Unsynchronised read+write. */
static __attribute__((noinline)) int toy_cancel(struct toy_timer *t)
{
	if (t->state == TOY_ARMED) {
		t->state = TOY_CANCELLED;
		return 1; /* prevented */
	}
	return 0;
}

static void *toy_timer_thread(void *arg)
{
	struct toy_engine *e = arg;

	pthread_barrier_wait(&e->armed);
	while (now_ns() < e->timer->deadline_ns)
		; /* the toy's "wheel": spin to the deadline */
	toy_fire(e->timer);
	pthread_barrier_wait(&e->settled);
	return NULL;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 1;
	long fired = 0, prevented = 0, both = 0;

	if (rounds < 1) {
		fprintf(stderr, "usage: %s [rounds >= 1]\n", argv[0]);
		return 2;
	}
	for (long r = 0; r < rounds; r++) {
		struct toy_engine e;
		struct toy_timer t = {TOY_IDLE, 0, 0};

		pthread_barrier_init(&e.armed, NULL, 2);
		pthread_barrier_init(&e.settled, NULL, 2);
		e.timer = &t;
		/* arm: written before the barrier, so properly published */
		t.state = TOY_ARMED;
		t.deadline_ns = now_ns() + 1000000; /* 1 ms */
		if (pthread_create(&e.thread, NULL, toy_timer_thread, &e) != 0)
			return 1;
		pthread_barrier_wait(&e.armed);
		/* cancel close to the deadline, so either side may go first */
		while (now_ns() < t.deadline_ns)
			;
		int p = toy_cancel(&t);
		pthread_barrier_wait(&e.settled);
		pthread_join(e.thread, NULL);
		pthread_barrier_destroy(&e.armed);
		pthread_barrier_destroy(&e.settled);
		fired += t.fired_calls;
		prevented += p;
		both += t.fired_calls && p;
	}
	printf("seeded_race: %ld rounds, fired %ld, prevented %ld, both (exactly-once broken) %ld\n",
	       rounds, fired, prevented, both);
	return 0;
}
