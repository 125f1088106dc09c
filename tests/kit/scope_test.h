/* What the timeout-scope tests (tests/engine/scope*.c) share: their
 * deadlines, a block that sleeps, and main's start and end around its
 * cases (RUN, cases.h), with the one engine every case of a test runs its
 * scopes on (argv[2] picks the cases: `test_engine_scope* ENGINE [CASE]`).
 *
 * Deadlines are short (5-20 ms) and blocks that must be interrupted wait far
 * longer (LONG_WAIT), so a missed interrupt shows as a failed check rather
 * than as a hang; every case is bounded.  Deadlines that must not pass are
 * FAR away, and what a case checks is how the block ended (which scope's
 * interrupt, which handlers ran), never how fast. */
#ifndef TMO_TEST_SCOPE_TEST_H
#define TMO_TEST_SCOPE_TEST_H

#include <stdint.h>

#include "check.h" /* RUN (cases.h) */
#include "tmo/scope.h"
#include "tmo/tmo.h"

#define MS TMO_NSEC_PER_MSEC
/* What an interrupted wait would otherwise take.  Blocks that must be
 * interrupted wait this long, and must have been interrupted within half of
 * it: a liveness bound (a missed interrupt fails the check instead of
 * hanging), far beyond any scheduling delay of a loaded machine. */
#define LONG_WAIT (20 * TMO_NSEC_PER_SEC)
#define DEADLINE (10 * MS)
/* A deadline that must not pass while its block runs, however slowly. */
#define FAR (600 * TMO_NSEC_PER_SEC)

/* Nanoseconds from t0 (a tmo_now_ns reading) to now. */
int64_t sc_since(int64_t t0);

/* A block: sleeps (tmo_sleep) the int64_t nanoseconds at arg, returns 7. */
intptr_t sc_sleep_then(void *arg);

/* main's start: et_init (argv[1], the engine; `test` names the test in the
 * banner), argv[2], the cases to run (et_cases_from_args), and the engine
 * every case uses, created into *eng (on failure says why and exits 1). */
void sc_begin(int argc, char **argv, const char *test, struct tmo **eng);

/* main's end, after its cases (RUN): destroys *eng, checks that the
 * library is back to the allocations it had before sc_begin's create
 * (scopes allocate nothing), and returns the exit status. */
int sc_end(struct tmo **eng);

#endif
