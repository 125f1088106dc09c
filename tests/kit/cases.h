/* How a test declares its cases, the one way: main calls RUN(fn) for each,
 * in order.  A case is a function `void fn(void)` that reports what it
 * finds through check.h's CHECK; after it RUN prints "PASS fn" or
 * "FAIL fn" on a line of its own (stdout), the form that the
 * checks_can_fail ctests (tests/engine/fixtures.cmake) look for.  main
 * returns TEST_EXIT() (check.h): non-zero when any check failed.
 *
 * Engine tests, run as `test_engine_<name> ENGINE [CASE]`, pass argv to
 * et_cases_from_args, so that CASE picks the cases to run; a test whose
 * cases may hang sets a watchdog (et_case_watchdog), so that a deadlock
 * fails that case by name instead of running into ctest's timeout. */
#ifndef TMO_TEST_CASES_H
#define TMO_TEST_CASES_H

/* Run case fn, under its own name; see above. */
#define RUN(fn) et_run_case(#fn, fn)
void et_run_case(const char *name, void (*fn)(void));

/* argv[2], when given (argc > 2): from now on only the cases whose names
 * contain it run; the others are left out, reported neither way. */
void et_cases_from_args(int argc, char **argv);

/* From now on each case runs under a watchdog of `seconds` (0: none): a
 * case still running then prints "case NAME did not finish in S s (a
 * deadlock?)" on stderr and the process exits 1.  The watchdog is a thread
 * of the test's own, started by the first call with seconds > 0 (so a
 * test that counts its threads calls this first), and it fires under
 * ThreadSanitizer too, where a signal's handler waits while its thread
 * blocks in a mutex. */
void et_case_watchdog(int seconds);

/* The name of the case that runs now ("?" outside RUN): for a skip's or a
 * failure's message. */
const char *et_case_now(void);

#endif
