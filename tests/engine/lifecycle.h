/*
 * What the lifecycle tests share (tests/engine/lifecycle.c: destroy, misuse
 * from a callback, stale identities; tests/engine/lifecycle_fork.c: fork):
 * main's start, and create and arm through the skip on a shortage.
 *
 * `test_engine_<test> ENGINE [CASE]` (CASE: run only the cases whose names
 * contain it, e.g. test_destroy).  Every case runs under a watchdog
 * (et_case_watchdog, cases.h): a deadlock fails the case by name instead of
 * hanging ctest.  TMO_EAGAIN from create
 * or arm is a shortage of a per-user kernel resource (posix:
 * RLIMIT_SIGPENDING, shared by every process of the user; thread: threads),
 * not a failure: the test says so and exits 77, which ctest reports as a
 * skip (tests/resource_locks.cmake gives every lifecycle test, on every
 * engine, SKIP_RETURN_CODE 77).
 */
#ifndef TMO_TEST_LIFECYCLE_H
#define TMO_TEST_LIFECYCLE_H

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

/* A shortage the environment caused (et_skip_if_shortage) skips the case. */
static inline struct tmo *new_engine(void) { return et_create_or_skip(et_ops, et_case_now()); }

/* tmo_arm, skipping the case on a shortage the environment caused. */
static inline int arm(struct tmo *e, struct tmo_timer *t, int64_t timeout, tmo_callback *cb,
                      void *arg)
{
	return et_arm_or_skip(e, t, timeout, cb, arg, et_case_now());
}

/* A cancel's answer for a timer whose callback ran: FIRED, or WAITED. */
static inline int is_resolved(int rc) { return rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED; }

/* A callback that adds one to the atomic_llong at arg. */
static void count_cb(struct tmo_timer *t, void *arg)
{
	(void)t;
	atomic_fetch_add((atomic_llong *)arg, 1);
}

/* main's start: the engine (argv[1]), the cases to run (argv[2]), and this
 * process's queued-signal limit raised as far as allowed.  main then runs
 * its cases, each under a watchdog (et_case_watchdog, then RUN), and
 * returns TEST_EXIT(). */
static inline void lifecycle_begin(int argc, char **argv, const char *test)
{
	et_init(argc, argv, test);
	et_cases_from_args(argc, argv);
	et_raise_sigpending();
}

#endif
