/*
 * What the lifecycle tests share (tests/engine/lifecycle.c: destroy, misuse
 * from a callback, stale identities; tests/engine/lifecycle_fork.c: fork):
 * the case runner and its watchdog, and create and arm through the skip on
 * a shortage.
 *
 * `test_engine_<test> ENGINE [CASE]` (CASE: run only the case of that name,
 * e.g. test_destroy).  Every case runs under a watchdog (alarm): a deadlock
 * fails the case by name instead of hanging ctest.  TMO_EAGAIN from create
 * or arm is a shortage of a per-user kernel resource (posix:
 * RLIMIT_SIGPENDING, shared by every process of the user; thread: threads),
 * not a failure: the test says so and exits 77, which ctest reports as a
 * skip (tests/resource_locks.cmake gives every lifecycle test, on every
 * engine, SKIP_RETURN_CODE 77).
 */
#ifndef TMO_TEST_LIFECYCLE_H
#define TMO_TEST_LIFECYCLE_H

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC
#define SEC TMO_NSEC_PER_SEC
/* "a due timer has fired", "a child has exited": liveness bounds on loaded
 * cores, not measurements. */
#define LIVENESS (5 * SEC)

/* The case that runs now: the watchdog's report and a skip name it. */
static const char *current_case = "?";

/* argv[2], the one case to run; NULL: every case. */
static const char *only;

/* The watchdog: a case still running at its alarm fails by name. */
static void on_alarm(int sig)
{
	(void)sig;
	char msg[160];
	int n = snprintf(msg, sizeof msg, "lifecycle: case %s did not finish in time (deadlock?)\n",
	                 current_case);
	if (n > 0)
		(void)!write(2, msg, (size_t)n);
	_exit(1);
}

/* A shortage the environment caused (et_skip_if_shortage) skips the case. */
static inline struct tmo *new_engine(void) { return et_create_or_skip(et_ops, current_case); }

/* tmo_arm, skipping the case on a shortage the environment caused. */
static inline int arm(struct tmo *e, struct tmo_timer *t, int64_t timeout, tmo_callback *cb,
                      void *arg)
{
	return et_arm_or_skip(e, t, timeout, cb, arg, current_case);
}

/* A cancel's answer for a timer whose callback ran: FIRED, or WAITED. */
static inline int is_resolved(int rc) { return rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED; }

/* A callback that adds one to the atomic_llong at arg. */
static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_llong *)arg, 1);
}

/* Run fn as case `name` under a watchdog of `seconds`; prints PASS or FAIL. */
static void run_case(void (*fn)(void), const char *name, int seconds)
{
	if (only != NULL && strcmp(name, only) != 0)
		return;
	current_case = name;
	alarm((unsigned)seconds);
	int before = tmo_test_failures;
	fn();
	alarm(0);
	printf("%s %s\n", tmo_test_failures == before ? "PASS" : "FAIL", name);
	fflush(stdout);
}

/* A case: its function, its name, its watchdog in seconds. */
struct lifecycle_case {
	void (*fn)(void);
	const char *name;
	int seconds;
};
#define CASE(fn, seconds) {fn, #fn, seconds}

/* main: the engine (argv[1]), the one case (argv[2]), the watchdog, this
 * process's queued-signal limit raised as far as allowed; then the n cases
 * in order.  Returns the exit status. */
static int lifecycle_main(int argc, char **argv, const char *test,
                          const struct lifecycle_case *cases, int n)
{
	et_init(argc, argv, test);
	only = argc > 2 ? argv[2] : NULL;
	signal(SIGALRM, on_alarm);
	et_raise_sigpending();
	for (int i = 0; i < n; i++)
		run_case(cases[i].fn, cases[i].name, cases[i].seconds);
	return TEST_EXIT();
}

#endif
