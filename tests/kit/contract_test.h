/* What the engine-contract tests (tests/engine/contract*.c) share: their
 * time units and liveness bound, an engine created and destroyed under
 * CHECK, an arm that asks again while the engine refuses for capacity, and
 * main's start and end around its cases (RUN, cases.h; argv[2] picks them:
 * `test_engine_contract* ENGINE [CASE]`).
 *
 * Every case creates its own engine, counts what it sees, and reports each
 * violation through CHECK (the exit status is non-zero if any check failed).
 * Every wait is bounded, so a lost timer fails the case instead of hanging.
 * Engines with THREAD_PER_TIMER get smaller sizes (an arm starts a thread),
 * never weaker checks. */
#ifndef TMO_TEST_CONTRACT_TEST_H
#define TMO_TEST_CONTRACT_TEST_H

#include <stdint.h>

#include "check.h" /* RUN (cases.h) */
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC
#define US TMO_NSEC_PER_USEC
/* Upper bound for "a due timer has fired" on 2 noisy cores: a liveness
 * bound, not a lateness measurement. */
#define LIVENESS (3 * TMO_NSEC_PER_SEC)

/* A new engine of et_ops; CHECKs that create succeeded (NULL if not). */
struct tmo *ct_new_engine(void);

/* tmo_destroy, CHECKed to return 0 and clear *e. */
void ct_destroy_engine(struct tmo **e);

/* 1 when a cancel's result says the callback ran (FIRED or WAITED). */
int ct_is_resolved(int rc);

/* tmo_arm, asked again while the engine refuses for capacity (TMO_EAGAIN:
 * mpsc's flow control, while its timer thread, starved on a loaded machine,
 * has not taken back the nodes in transit), as an application would.  A
 * refusal that outlasts LIVENESS is the engine's failure to recover: it is
 * returned, and fails the check.  Callbacks arm with tmo_arm itself (a wait
 * there would hold up the very thread that recycles). */
int ct_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb, void *arg);

/* main's start: et_init (argv[1], the engine) and argv[2], the cases to
 * run (et_cases_from_args); `test` names the test in the banner. */
void ct_begin(int argc, char **argv, const char *test);

/* main's end, after its cases: says how often ct_arm asked again if it
 * ever did, and returns the exit status. */
int ct_end(void);

#endif
