/*
 * What the thread engine's unit tests share (tests/unit/thread.c: threads
 * as a resource, reaping, fork; tests/unit/thread_callbacks.c: how
 * callbacks run): the engine's name, the liveness bound and the wait.
 */
#ifndef TMO_TEST_UNIT_THREAD_H
#define TMO_TEST_UNIT_THREAD_H

#include "check.h"
#include "engine_test.h"
#include "core/internal.h" /* TMO__UNDER_SANITIZER */
#include "tmo/testing.h"
#include "tmo/tmo.h"

/* The engine under test. */
#define ENGINE "thread"

#define MS TMO_NSEC_PER_MSEC
/* A bound for "it happened" (a thread started, a callback ran), not a
 * measurement: far beyond what a loaded machine delays a thread. */
#define LIVENESS (10 * TMO_NSEC_PER_SEC)
/* Waits look every millisecond (the order cases every 2): with a thread per
 * timer, a waiter that looked more often would take the cores from the very
 * threads whose order and lateness the cases check. */
#define WAIT_UNTIL(cond) ET_WAIT_UNTIL_EVERY(cond, LIVENESS, MS)

#endif
